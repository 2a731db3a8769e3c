//! The lease the runner's events are attached to, replaced on a schedule so that events expire.

use std::time::Duration;

use tokio::sync::watch;

use crate::{FactStore, LeaseId};

/// The schedule of events leases for events kept `max_age`: a new lease every `rotation`, each
/// granted for `max_age + rotation` and never renewed. The newest lease always has at least
/// `max_age` left, so a commit never carries a lease about to expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct EventsLeaseSchedule {
    pub rotation: Duration,
    pub ttl: Duration,
}

impl EventsLeaseSchedule {
    /// The schedule for `max_age` (rotation a sixth of it, at least one second).
    pub(super) fn new(max_age: Duration) -> Self {
        let rotation = (max_age / 6).max(Duration::from_secs(1));
        EventsLeaseSchedule {
            rotation,
            ttl: max_age.saturating_add(rotation),
        }
    }
}

/// Grants a lease on `schedule` and publishes it on `leases` until the receivers are gone. A
/// grant that fails is retried after a second; meanwhile the last lease (still valid for at
/// least `max_age`) stays published.
pub(super) async fn rotate<S: FactStore>(
    store: S,
    schedule: EventsLeaseSchedule,
    leases: watch::Sender<Option<LeaseId>>,
) {
    loop {
        let wait = match store.grant_lease(schedule.ttl).await {
            Ok(lease) => {
                if leases.send(Some(lease.id)).is_err() {
                    return;
                }
                schedule.rotation
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot grant the events lease; retrying in 1 s");
                Duration::from_secs(1)
            }
        };
        tokio::time::sleep(wait).await;
        if leases.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_lease_outlives_the_max_age() {
        let hour = EventsLeaseSchedule::new(Duration::from_secs(3600));
        assert_eq!(hour.rotation, Duration::from_secs(600));
        assert_eq!(hour.ttl, Duration::from_secs(4200));
        let tiny = EventsLeaseSchedule::new(Duration::from_millis(600));
        assert_eq!(tiny.rotation, Duration::from_secs(1));
        assert!(tiny.ttl >= tiny.rotation);
    }
}
