//! [`ServiceDns`]: endpoints in, DNS records out.

use std::collections::BTreeMap;

use ccattler_core::schema::{self, Endpoints, RecordKey};
use ccattler_core::{
    Change, Controller, Fact, FactView, Key, ReconcileContext, ReconcileError, Value,
};

use crate::{DEFAULT_DOMAIN, DOMAIN, DnsRecord, ERRORS, RECORDS, Target, is_label};

/// The longest name DNS allows, in bytes, without the final dot.
const MAX_NAME: usize = 253;

/// Keeps one [`DnsRecord`] per service that has ready instances (see the [crate docs](crate)).
///
/// # Rules
///
/// - A service whose endpoints list at least one `host:port` gets `dns/record/{svc}`: its name is
///   the service's path segments in reverse, then the domain (`team/web` in `prod.example.com`:
///   `web.team.prod.example.com`), its targets the endpoints' addresses.
/// - A service with no ready instance has no record, so that clients fail fast instead of
///   connecting nowhere; a record whose service has no endpoints any more is deleted.
/// - What cannot become a record is said in `dns/error/{svc}`: a path segment that is not a DNS
///   label ([`is_label`]), a name over 253 bytes, endpoints that do not decode (no record), an
///   address that is not `host:port` (left out of the record). The error goes once the cause does.
///
/// # Errors
///
/// A domain in `config/dns/domain` that is not dot-separated DNS labels fails the reconcile
/// ([`ReconcileError::Failed`]): every name would be wrong, so the runner keeps the records as
/// they are and retries with backoff until the operator fixes the domain.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServiceDns;

impl Controller for ServiceDns {
    fn name(&self) -> &str {
        "service-dns"
    }

    fn watches(&self) -> Vec<String> {
        vec![schema::SERVICE_ENDPOINTS.to_owned(), DOMAIN.to_owned()]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![RECORDS.to_owned(), ERRORS.to_owned()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let domain = domain(facts)?;
        let mut wanted: BTreeMap<Key, Value> = BTreeMap::new();
        for fact in facts.scan(schema::SERVICE_ENDPOINTS) {
            let Some(RecordKey::Endpoints(service)) = RecordKey::parse(&fact.key) else {
                continue;
            };
            let (record, problems) = derive(service, fact, &domain);
            if let Some(record) = record {
                wanted.insert(Key::join(RECORDS, [service])?, schema::encode(&record));
            }
            if !problems.is_empty() {
                wanted.insert(Key::join(ERRORS, [service])?, problems.join("; ").into());
            }
        }
        let mut changes = Vec::new();
        for prefix in [RECORDS, ERRORS] {
            for fact in facts.scan(prefix) {
                if !wanted.contains_key(&fact.key) {
                    changes.push(Change::delete(fact.key.clone()));
                }
            }
        }
        // Unchanged values are no-ops: the runner drops them.
        changes.extend(
            wanted
                .into_iter()
                .map(|(key, value)| Change::put(key, value)),
        );
        Ok(changes)
    }
}

/// The domain without a final dot, checked.
fn domain(facts: &FactView) -> Result<String, ReconcileError> {
    let Some(fact) = facts.get(DOMAIN) else {
        return Ok(DEFAULT_DOMAIN.to_owned());
    };
    let text = fact.value_str().unwrap_or_default().trim();
    let domain = text.strip_suffix('.').unwrap_or(text);
    if domain.is_empty() || !domain.split('.').all(is_label) {
        return Err(ReconcileError::failed(format!(
            "{DOMAIN} holds {text:?}, which is not a DNS domain; write dot-separated labels of \
             lowercase letters, digits and `-`, such as `prod.example.com`"
        )));
    }
    Ok(domain.to_owned())
}

/// The record of one service, if it gets one, and what is wrong with its endpoints.
fn derive(service: &str, fact: &Fact, domain: &str) -> (Option<DnsRecord>, Vec<String>) {
    let labels: Vec<&str> = service.split('/').rev().collect();
    if let Some(bad) = labels.iter().find(|label| !is_label(label)) {
        let problem = format!(
            "no record: the service name segment `{bad}` is not a DNS label (1 to 63 lowercase \
             letters, digits or `-`, no `-` at either end)"
        );
        return (None, vec![problem]);
    }
    let name = format!("{}.{domain}", labels.join("."));
    if name.len() > MAX_NAME {
        let problem = format!("no record: the name {name} is over {MAX_NAME} bytes");
        return (None, vec![problem]);
    }
    let endpoints: Endpoints = match schema::decode(fact) {
        Ok(endpoints) => endpoints,
        Err(error) => return (None, vec![format!("no record: {error}")]),
    };
    let mut targets = Vec::new();
    let mut problems = Vec::new();
    for endpoint in &endpoints.endpoints {
        let address = &endpoint.address;
        match target(address) {
            // Two instances at one address are one target.
            Some(target) if targets.last() == Some(&target) => {}
            Some(target) => targets.push(target),
            None => problems.push(format!(
                "address `{address}` is not host:port with a port from 1 to 65535 (left out)"
            )),
        }
    }
    let record = (!targets.is_empty()).then_some(DnsRecord { name, targets });
    (record, problems)
}

/// `host:port` (`[v6]:port` too), with a host and a port that is not 0.
fn target(address: &str) -> Option<Target> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port: u16 = port.parse().ok().filter(|port| *port != 0)?;
    (!host.is_empty()).then(|| Target {
        host: host.to_owned(),
        port,
    })
}
