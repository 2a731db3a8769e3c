//! The autoscaler's arithmetic, as Kubernetes' horizontal pod autoscaler documents it: what one
//! metric asks for, and how the stabilization windows and the scale-up limit temper it.

use std::time::Duration;

/// Metrics within a tenth of their target ask for no change.
pub(crate) const TOLERANCE: f64 = 0.1;

/// How long after a scale-up the count may go up again.
pub(crate) const SCALE_UP_PERIOD: Duration = Duration::from_secs(15);

/// One instance as a per-instance metric sees it: whether it is ready, and its reading in the
/// target's unit (`None`: no reading yet).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Reading {
    pub ready: bool,
    pub value: Option<f64>,
}

/// The count one per-instance metric asks for, with `current` instances, readings of each and a
/// target per instance; `None` when no ready instance has a reading.
///
/// Instances without a reading count as using the target when the others ask to scale down,
/// and nothing when they ask to scale up; instances not ready count as using nothing, and only
/// when the others ask to scale up. When that makes the direction turn, or brings the ratio
/// within the tolerance, the count stays.
pub(crate) fn per_instance(current: u32, readings: &[Reading], target: f64) -> Option<u32> {
    let measured: Vec<f64> = readings
        .iter()
        .filter(|r| r.ready)
        .filter_map(|r| r.value)
        .collect();
    if measured.is_empty() || target <= 0.0 {
        return None;
    }
    let missing = readings
        .iter()
        .filter(|r| r.ready && r.value.is_none())
        .count();
    let unready = readings.iter().filter(|r| !r.ready).count();
    let sum: f64 = measured.iter().sum();
    let ratio = sum / (measured.len() as f64 * target);
    let scale_up = ratio > 1.0;
    let unready_counted = unready > 0 && scale_up;
    if missing == 0 && !unready_counted {
        if (ratio - 1.0).abs() <= TOLERANCE {
            return Some(current);
        }
        return Some(ceil(ratio * measured.len() as f64));
    }
    // Fill in conservatively: toward no change.
    let mut count = measured.len();
    let mut total = sum;
    if missing > 0 {
        count += missing;
        if !scale_up {
            total += missing as f64 * target;
        }
    }
    if unready_counted {
        count += unready;
    }
    let new_ratio = total / (count as f64 * target);
    let turned = (ratio < 1.0 && new_ratio > 1.0) || (ratio > 1.0 && new_ratio < 1.0);
    if (new_ratio - 1.0).abs() <= TOLERANCE || turned {
        return Some(current);
    }
    let asked = ceil(new_ratio * count as f64);
    let against = (new_ratio < 1.0 && asked > current) || (new_ratio > 1.0 && asked < current);
    Some(if against { current } else { asked })
}

/// The count a service-wide metric asks for: `value` in all, `target` per instance.
pub(crate) fn per_service(current: u32, value: f64, target: f64) -> Option<u32> {
    if target <= 0.0 {
        return None;
    }
    let ratio = value / (target * f64::from(current.max(1)));
    if (ratio - 1.0).abs() <= TOLERANCE {
        return Some(current);
    }
    Some(ceil(value / target))
}

fn ceil(value: f64) -> u32 {
    // Saturating: a reading far above its target asks for the most there can be.
    value.ceil().clamp(0.0, f64::from(u32::MAX)) as u32
}

/// The count to apply now: the raw `recommendation`, held back by the stabilization windows
/// (over `history`, the raw recommendations as `(since_ms, count)`, oldest first, the newest
/// being the one of now) and the scale-up limit: at most double, or four more, and not within
/// [`SCALE_UP_PERIOD`] of the last scale-up (`scaled_up_at`).
pub(crate) fn stabilized(
    current: u32,
    history: &[(u64, u32)],
    now_ms: u64,
    up_window: Duration,
    down_window: Duration,
    scaled_up_at: Option<u64>,
) -> u32 {
    let within = |window: Duration| {
        let start = now_ms.saturating_sub(window.as_millis() as u64);
        // The recommendation in force at the window's start, and every one since.
        let first = history
            .iter()
            .rposition(|(since, _)| *since <= start)
            .unwrap_or(0);
        history[first..].iter().map(|(_, count)| *count)
    };
    let up = within(up_window).min().unwrap_or(current);
    let down = within(down_window).max().unwrap_or(current);
    let mut count = current;
    if count < up {
        let limit = current.saturating_mul(2).max(current.saturating_add(4));
        let recently = scaled_up_at
            .is_some_and(|at| now_ms < at.saturating_add(SCALE_UP_PERIOD.as_millis() as u64));
        count = if recently { current } else { up.min(limit) };
    }
    if count > down {
        count = down;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(value: f64) -> Reading {
        Reading {
            ready: true,
            value: Some(value),
        }
    }

    #[test]
    fn one_metric_asks_as_the_hpa_documents() {
        // 4 instances at 90 % against 60 %: ceil(4 x 1.5) = 6.
        assert_eq!(per_instance(4, &[ready(90.0); 4], 60.0), Some(6));
        // Within a tenth of the target: no change.
        assert_eq!(per_instance(4, &[ready(64.0); 4], 60.0), Some(4));
        // Half the target: half the instances.
        assert_eq!(per_instance(4, &[ready(30.0); 4], 60.0), Some(2));
        // No reading at all: nothing to say.
        let none = Reading {
            ready: true,
            value: None,
        };
        assert_eq!(per_instance(4, &[none; 4], 60.0), None);
    }

    #[test]
    fn instances_without_readings_or_not_ready_pull_toward_no_change() {
        let none = Reading {
            ready: true,
            value: None,
        };
        let starting = Reading {
            ready: false,
            value: None,
        };
        // Scaling down, the one without a reading counts as at the target: 3 x 30 + 60 over 4
        // at 60 is 0.625, so ceil(2.5) = 3, not 2.
        assert_eq!(
            per_instance(4, &[ready(30.0), ready(30.0), ready(30.0), none], 60.0),
            Some(3)
        );
        // Scaling up, two starting instances count as using nothing: 2 x 120 over 4 at 60 is
        // exactly the target: no change.
        assert_eq!(
            per_instance(4, &[ready(120.0), ready(120.0), starting, starting], 60.0),
            Some(4)
        );
        // Scaling down, instances not ready are left out.
        assert_eq!(
            per_instance(4, &[ready(15.0), ready(15.0), starting], 60.0),
            Some(1)
        );
    }

    #[test]
    fn a_service_metric_asks_for_its_total_over_the_target() {
        assert_eq!(per_service(2, 500.0, 50.0), Some(10));
        assert_eq!(per_service(10, 520.0, 50.0), Some(10), "within a tenth");
        assert_eq!(per_service(10, 0.0, 50.0), Some(0));
    }

    #[test]
    fn windows_hold_a_scale_down_and_the_limit_paces_a_scale_up() {
        let min = Duration::from_secs(60);
        let down = Duration::from_secs(300);
        // Asked for 2 a minute ago, after 8 for longer: the window still holds 8.
        let history = [(0, 8), (240_000, 2)];
        assert_eq!(
            stabilized(8, &history, 300_000, Duration::ZERO, down, None),
            8
        );
        // Once 8 leaves the window, 2 holds.
        assert_eq!(
            stabilized(8, &history, 540_001, Duration::ZERO, down, None),
            2
        );
        // Up from 2 to 20: at most 6 at once (4 more, or double), and not again for 15 s.
        let up = [(0, 2), (1_000, 20)];
        assert_eq!(stabilized(2, &up, 1_000, Duration::ZERO, down, None), 6);
        assert_eq!(
            stabilized(6, &up, 10_000, Duration::ZERO, down, Some(1_000)),
            6
        );
        assert_eq!(
            stabilized(6, &up, 16_001, Duration::ZERO, down, Some(1_000)),
            12
        );
        // A scale-up window asks the higher count to hold: 20 only since 1 s, window 60 s.
        assert_eq!(stabilized(2, &up, 30_000, min, down, None), 2);
    }
}
