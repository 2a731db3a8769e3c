//! Who may do what through the store protocol: [`Principal`], the node write rule
//! [`node_may_write`], the hidden keys ([`hidden`]) and who reads a secret.

use ccattler_core::schema::{self, Assignment, ServiceSpec};
use ccattler_core::{FactStore, Key, StoreError};

use super::ServerError;

/// The prefix reserved for credentials and the server's own records. Nothing under it is ever
/// read, compared, watched or written through the protocol, by anyone: the server keeps lease
/// owners under [`LEASE_OWNERS`], and a platform keeps its credentials here (`cca` keeps token
/// hashes under `auth/token/`) knowing no client of the protocol can reach them.
pub const AUTH_PREFIX: &str = "auth/";

/// Where the server records who granted a lease: `auth/lease/{id}`, attached to the lease
/// itself so the record vanishes with it.
pub const LEASE_OWNERS: &str = "auth/lease/";

/// Who sent an authenticated request, as an [`Authorizer`](super::Authorizer) decides.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// An administrator: may write any key outside [`AUTH_PREFIX`] and use any lease.
    Admin,
    /// The agent of the named node: may write only that node's facts ([`node_may_write`]) and
    /// use only the leases it granted itself.
    Node(String),
}

impl Principal {
    /// Whether this principal may write (put or delete) `key`: never under [`AUTH_PREFIX`];
    /// an admin anything else; a node what [`node_may_write`] allows.
    pub fn may_write(&self, key: &str) -> bool {
        if key.starts_with(AUTH_PREFIX) {
            return false;
        }
        match self {
            Principal::Admin => true,
            Principal::Node(node) => node_may_write(node, key),
        }
    }

    /// Why this principal may not write `key`, in words; `None` when it may.
    pub fn write_refusal(&self, key: &str) -> Option<String> {
        if self.may_write(key) {
            return None;
        }
        Some(match self {
            Principal::Admin => format!("{key}: keys under {AUTH_PREFIX} are not writable"),
            Principal::Node(node) => format!(
                "{key}: the credential of node {node} writes only {}{node}, {}{node} and \
                 {}{node}/...",
                schema::NODE_LEASES,
                schema::OBSERVED_NODES,
                schema::OBSERVED_INSTANCES,
            ),
        })
    }

    /// Refuses anything but an admin.
    ///
    /// # Errors
    ///
    /// [`ServerError::Store`] holding [`StoreError::Denied`] (answered with 403) for a node.
    pub fn require_admin(&self) -> Result<(), ServerError> {
        match self {
            Principal::Admin => Ok(()),
            Principal::Node(node) => Err(ServerError::denied(format!(
                "the credential of node {node} may not do this; use an admin token"
            ))),
        }
    }

    /// How the server records this principal as a lease's owner.
    pub(crate) fn owner_name(&self) -> String {
        match self {
            Principal::Admin => "admin".to_owned(),
            Principal::Node(node) => format!("node/{node}"),
        }
    }
}

/// The write domain of node `node`'s credential: exactly its lease
/// ([`schema::keys::node_lease`], `lease/node/N`), its node record ([`schema::keys::node`],
/// `observed/node/N`), its instances' observations
/// ([`schema::keys::observed_instance`], `observed/instance/N/ID`) and its own events
/// (`event/{object}/node.N/{slot}`, [`schema::keys::node_event_writer`]).
///
/// # Guarantees
///
/// - A key is allowed only when it *equals* a key the schema builds for `node`, so `n1` never
///   writes `observed/node/n10` nor `observed/instance/n10/...`, and malformed keys
///   (`lease/node/n1/`, `observed/instance/n1//x`) are refused.
/// - An instance id is one key segment and never `.` or `..`: nothing looks like a path into
///   another node's keys (`observed/instance/n1/../n2/x` is refused).
/// - A node name that is not one plain segment (empty, containing `/`, `.` or `..`) writes
///   nothing.
///
/// ```
/// use ccattler_store::http_server::node_may_write;
///
/// assert!(node_may_write("n1", "observed/instance/n1/web-1"));
/// assert!(!node_may_write("n1", "observed/instance/n10/web-1"));
/// assert!(!node_may_write("n1", "desired/service/web"));
/// ```
pub fn node_may_write(node: &str, key: &str) -> bool {
    schema::keys::node_may_write(node, key)
}

/// Whether the protocol never shows `key` in a scan or watch, nor lets it be compared: secrets
/// ([`schema::SECRETS`]) and everything under [`AUTH_PREFIX`].
pub fn hidden(key: &str) -> bool {
    key.starts_with(schema::SECRETS) || key.starts_with(AUTH_PREFIX)
}

/// Whether `principal` may read `key` with `get`: never under [`AUTH_PREFIX`]; a secret only
/// by a node with a placement of a service that declares it; anything else by anyone.
pub(crate) async fn check_readable<S: FactStore>(
    store: &S,
    principal: &Principal,
    key: &Key,
) -> Result<(), ServerError> {
    if key.as_str().starts_with(AUTH_PREFIX) {
        return Err(ServerError::denied(format!(
            "{key}: keys under {AUTH_PREFIX} are never readable"
        )));
    }
    let Some(schema::RecordKey::Secret(secret)) = schema::RecordKey::parse(key) else {
        return Ok(());
    };
    let Principal::Node(node) = principal else {
        return Err(ServerError::denied(format!(
            "{key}: secrets are readable only by the nodes that run services declaring them"
        )));
    };
    let placements = store
        .scan(&schema::keys::node_placements(node).map_err(StoreError::from)?)
        .await?;
    let mut services: Vec<String> = placements
        .facts
        .iter()
        .filter_map(|fact| schema::decode::<Assignment>(fact).ok())
        .map(|assignment| assignment.service)
        .collect();
    services.sort();
    services.dedup();
    for service in services {
        let Ok(service_key) = schema::keys::service(&service) else {
            continue;
        };
        if let Some(fact) = store.get(&service_key).await?
            && let Ok(spec) = schema::decode::<ServiceSpec>(&fact)
            && spec.secrets.iter().any(|s| s.name == secret)
        {
            return Ok(());
        }
    }
    Err(ServerError::Store(StoreError::Denied(format!(
        "{key}: no service placed on node {node} declares this secret"
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_writes_its_lease_its_record_and_its_observations() {
        for key in [
            "lease/node/n1",
            "observed/node/n1",
            "observed/instance/n1/i-1",
            "observed/instance/n1/web-1-abc",
        ] {
            assert!(node_may_write("n1", key), "{key}");
            assert!(Principal::Node("n1".to_owned()).may_write(key), "{key}");
        }
    }

    #[test]
    fn a_node_writes_nothing_of_other_nodes_or_of_the_cluster() {
        for key in [
            "lease/node/n2",
            "observed/node/n2",
            "observed/instance/n2/i-1",
            "placement/n1/i-1",
            "desired/service/web",
            "desired/instance/i-1",
            "secret/db-pass",
            "auth/token/x",
            "auth/lease/7",
        ] {
            assert!(!node_may_write("n1", key), "{key}");
        }
    }

    #[test]
    fn a_node_named_like_a_prefix_of_another_stays_in_its_own_domain() {
        for key in [
            "lease/node/n10",
            "observed/node/n10",
            "observed/node/n1-b",
            "observed/instance/n10/i-1",
            "observed/instance/n1x/i-1",
        ] {
            assert!(!node_may_write("n1", key), "{key}");
        }
        assert!(node_may_write("n10", "observed/instance/n10/i-1"));
        assert!(!node_may_write("n10", "observed/instance/n1/i-1"));
    }

    #[test]
    fn path_tricks_are_refused() {
        for key in [
            "lease/node/n1/",
            "lease/node/n1/extra",
            "observed/node/n1/x",
            "observed/instance/n1",
            "observed/instance/n1/",
            "observed/instance/n1//x",
            "observed/instance/n1/a/b",
            "observed/instance/n1/../n2/i-1",
            "observed/instance/n1/..",
            "observed/instance/n1/.",
            "/lease/node/n1",
            "lease/node//n1",
            "lease//node/n1",
            "Lease/node/n1",
            " lease/node/n1",
        ] {
            assert!(!node_may_write("n1", key), "{key}");
        }
        for node in ["", ".", "..", "n1/x", "../n1"] {
            for key in [
                format!("lease/node/{node}"),
                format!("observed/node/{node}"),
                format!("observed/instance/{node}/i-1"),
            ] {
                assert!(!node_may_write(node, &key), "{node:?} {key}");
            }
        }
    }

    #[test]
    fn admins_write_everything_but_the_reserved_prefix() {
        assert!(Principal::Admin.may_write("desired/service/web"));
        assert!(Principal::Admin.may_write("secret/db-pass"));
        assert!(!Principal::Admin.may_write("auth/token/x"));
        assert!(!Principal::Admin.may_write(LEASE_OWNERS));
        assert!(Principal::Admin.write_refusal("auth/x").is_some());
        assert!(Principal::Admin.require_admin().is_ok());
    }

    #[test]
    fn refusals_name_the_node_domain() {
        let n1 = Principal::Node("n1".to_owned());
        assert_eq!(n1.write_refusal("observed/node/n1"), None);
        let why = n1.write_refusal("observed/node/n2").expect("refused");
        assert!(why.contains("lease/node/n1") && why.contains("observed/instance/n1/"));
        assert!(matches!(
            n1.require_admin(),
            Err(ServerError::Store(StoreError::Denied(_)))
        ));
    }

    #[test]
    fn secrets_and_credentials_are_hidden() {
        assert!(hidden("secret/db-pass"));
        assert!(hidden("auth/token/x"));
        assert!(!hidden("desired/secret/x"));
        assert!(!hidden("observed/node/n1"));
    }
}
