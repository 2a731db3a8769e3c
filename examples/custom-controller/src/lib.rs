//! # custom-controller: DNS records for the standard endpoints
//!
//! [`ServiceDns`] is the kind of controller a platform team adds beside the standard ones. It
//! reads where each service's ready instances serve (`endpoint/service/{svc}`, written by the
//! standard endpoint controller) and the cluster's DNS domain, and writes one [`DnsRecord`] per
//! service for the team's DNS server to serve: service `team/web` in `prod.example.com` is
//! `web.team.prod.example.com`, with one SRV-style target per ready instance.
//!
//! | key | value | writer |
//! |---|---|---|
//! | `config/dns/domain` | the domain as text, e.g. `prod.example.com` (absent: [`DEFAULT_DOMAIN`]) | the operator |
//! | `endpoint/service/{svc}` | [`Endpoints`](ccattler_core::schema::Endpoints) | the standard endpoint controller |
//! | `dns/record/{svc}` | [`DnsRecord`] as JSON | [`ServiceDns`] |
//! | `dns/error/{svc}` | why the service has no record, or an incomplete one, as text | [`ServiceDns`] |
//!
//! Its tests (`tests/dns.rs`) are snapshot tests: `ccattler_testkit::harness::Harness` runs the
//! controller on facts given in the test, and `insta` compares the plan it returns with the
//! text stored beside the test.

#![deny(missing_docs)]

mod service_dns;

pub use service_dns::ServiceDns;

use serde::{Deserialize, Serialize};

/// The key of the cluster's DNS domain.
pub const DOMAIN: &str = "config/dns/domain";
/// The domain when [`DOMAIN`] is absent.
pub const DEFAULT_DOMAIN: &str = "cluster.local";
/// Prefix of the records: `dns/record/{svc}` holds a [`DnsRecord`].
pub const RECORDS: &str = "dns/record/";
/// Prefix of the problems: `dns/error/{svc}` says why `svc` has no record, or an incomplete one.
pub const ERRORS: &str = "dns/error/";

/// What the DNS server serves for one service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsRecord {
    /// The fully qualified name, without the final dot: `web.team.prod.example.com`.
    pub name: String,
    /// One target per ready instance, in the order of the endpoints (sorted).
    pub targets: Vec<Target>,
}

/// Where one ready instance serves, as an SRV record names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The host: a node name or address.
    pub host: String,
    /// The port, never 0.
    pub port: u16,
}

/// Whether `label` is a DNS label: 1 to 63 lowercase ASCII letters, digits or `-`, with no `-`
/// at either end.
pub fn is_label(label: &str) -> bool {
    (1..=63).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}
