//! The connection to containerd: one gRPC channel, the namespace header on every request, leases,
//! and the mapping of gRPC failures to [`RuntimeError`].

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccattler_core::RuntimeError;
use containerd_client::services::v1::containers_client::ContainersClient;
use containerd_client::services::v1::content_client::ContentClient;
use containerd_client::services::v1::diff_client::DiffClient;
use containerd_client::services::v1::images_client::ImagesClient;
use containerd_client::services::v1::leases_client::LeasesClient;
use containerd_client::services::v1::snapshots::snapshots_client::SnapshotsClient;
use containerd_client::services::v1::tasks_client::TasksClient;
use containerd_client::services::v1::version_client::VersionClient;
use containerd_client::services::v1::{CreateRequest, DeleteRequest};
use containerd_client::tonic::metadata::{Ascii, MetadataValue};
use containerd_client::tonic::transport::Channel;
use containerd_client::tonic::{Code, Request, Status};

/// How long a lease lives if we die before deleting it; containerd's GC then frees what it held.
const LEASE_EXPIRY: Duration = Duration::from_secs(3600);

/// One channel to containerd and the namespace every request carries.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    channel: Channel,
    namespace: MetadataValue<Ascii>,
    namespace_name: String,
}

impl Conn {
    /// Connects to the socket (eagerly: a socket nobody answers on fails here) and checks that the
    /// daemon replies within `timeout`.
    pub(crate) async fn connect(
        socket: &Path,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Conn, RuntimeError> {
        let valid = !namespace.is_empty()
            && namespace
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        let header = namespace.parse().ok().filter(|_| valid);
        let Some(namespace_value) = header else {
            return Err(unreachable(
                format!("invalid containerd namespace {namespace:?}"),
                None,
            ));
        };
        let what = format!("containerd at {}", socket.display());
        let channel = match tokio::time::timeout(timeout, containerd_client::connect(socket)).await
        {
            Ok(Ok(channel)) => channel,
            Ok(Err(e)) => {
                return Err(unreachable(
                    format!("cannot connect to {what}: {e}"),
                    Some(Box::new(e)),
                ));
            }
            Err(_) => {
                return Err(unreachable(
                    format!("{what} did not answer in {timeout:?}"),
                    None,
                ));
            }
        };
        let conn = Conn {
            channel,
            namespace: namespace_value,
            namespace_name: namespace.to_owned(),
        };
        let mut version = VersionClient::new(conn.channel.clone());
        match tokio::time::timeout(timeout, version.version(conn.req(()))).await {
            Ok(Ok(_)) => Ok(conn),
            Ok(Err(status)) => Err(grpc(&format!("version of {what}"), status)),
            Err(_) => Err(unreachable(
                format!("{what} did not answer in {timeout:?}"),
                None,
            )),
        }
    }

    /// The namespace name.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace_name
    }

    /// A request carrying the namespace header.
    pub(crate) fn req<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request
            .metadata_mut()
            .insert("containerd-namespace", self.namespace.clone());
        request
    }

    /// A request carrying the namespace header and, when given, the lease header.
    pub(crate) fn leased<T>(&self, message: T, lease: Option<&Lease>) -> Request<T> {
        let mut request = self.req(message);
        if let Some(lease) = lease {
            request
                .metadata_mut()
                .insert("containerd-lease", lease.header.clone());
        }
        request
    }

    pub(crate) fn containers(&self) -> ContainersClient<Channel> {
        ContainersClient::new(self.channel.clone())
    }
    pub(crate) fn content(&self) -> ContentClient<Channel> {
        ContentClient::new(self.channel.clone())
    }
    pub(crate) fn diff(&self) -> DiffClient<Channel> {
        DiffClient::new(self.channel.clone())
    }
    pub(crate) fn images(&self) -> ImagesClient<Channel> {
        ImagesClient::new(self.channel.clone())
    }
    pub(crate) fn snapshots(&self) -> SnapshotsClient<Channel> {
        SnapshotsClient::new(self.channel.clone())
    }
    pub(crate) fn tasks(&self) -> TasksClient<Channel> {
        TasksClient::new(self.channel.clone())
    }

    /// Creates a lease that expires by itself after an hour: what is made under it (content,
    /// snapshots) is safe from containerd's garbage collector until something references it.
    pub(crate) async fn lease(&self, purpose: &str) -> Result<Lease, RuntimeError> {
        let id = format!("ccattler-{purpose}-{}", unique());
        let expire = humane_rfc3339(SystemTime::now() + LEASE_EXPIRY);
        let labels = [("containerd.io/gc.expire".to_owned(), expire)].into();
        let request = self.req(CreateRequest {
            id: id.clone(),
            labels,
        });
        LeasesClient::new(self.channel.clone())
            .create(request)
            .await
            .map_err(|s| grpc("lease create", s))?;
        let header = id
            .parse()
            .map_err(|_| unreachable(format!("lease id {id:?} is not a header value"), None))?;
        Ok(Lease { id, header })
    }

    /// Deletes a lease; what it protected stays if something else references it.
    pub(crate) async fn release(&self, lease: Lease) -> Result<(), RuntimeError> {
        let request = self.req(DeleteRequest {
            id: lease.id,
            sync: false,
        });
        match LeasesClient::new(self.channel.clone())
            .delete(request)
            .await
        {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(grpc("lease delete", s)),
        }
    }
}

/// A containerd lease held while an image is unpacked or a container is made.
#[derive(Debug)]
pub(crate) struct Lease {
    id: String,
    header: MetadataValue<Ascii>,
}

/// A process-unique suffix: nanoseconds since the epoch and a counter.
pub(crate) fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `time` as RFC 3339 in UTC (`2026-01-02T03:04:05Z`), the form containerd's GC labels take.
fn humane_rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// An [`RuntimeError::Unreachable`] with a message and an optional cause.
pub(crate) fn unreachable(
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
) -> RuntimeError {
    RuntimeError::Unreachable { message, source }
}

/// Maps a failed containerd call that has no more specific meaning.
///
/// The contract has no variant for "containerd refused an operation", so such failures become
/// [`RuntimeError::Unreachable`] with containerd's message: the agent cannot tell what happened.
pub(crate) fn grpc(what: &str, status: Status) -> RuntimeError {
    let message = match status.code() {
        Code::Unavailable => format!("containerd is not reachable ({what}): {}", status.message()),
        code => format!("containerd {what} failed ({code:?}): {}", status.message()),
    };
    unreachable(message, Some(Box::new(status)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(humane_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_251_199); // leap year, Feb 29
        assert_eq!(humane_rfc3339(t), "2024-02-29T23:59:59Z");
    }
}
