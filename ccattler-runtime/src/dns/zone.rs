//! [`Zone`]: the DNS names of the services' ready endpoints, answered from memory.
//!
//! Pure: it is told each `endpoint/service/{svc}` record as it changes ([`Zone::set`]) and
//! answers a question ([`Zone::answer`]) without I/O, so its rules are tested without a socket.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hickory_server::proto::rr::rdata::{A, AAAA, SRV};
use hickory_server::proto::rr::{Name, RData, Record, RecordType};

use ccattler_core::schema::Endpoints;

/// The label under the domain that every service name sits under: `web.service.cca`.
pub const SERVICE_LABEL: &str = "service";

/// What the zone says to one question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The name exists; these are its records of the asked type (none: the name has no record
    /// of that type, NOERROR with an empty answer). `additional` holds the addresses of SRV
    /// targets.
    Records {
        /// The answer section.
        answers: Vec<Record>,
        /// The additional section.
        additional: Vec<Record>,
    },
    /// The name is under the zone's domain but names nothing (NXDOMAIN).
    NoSuchName,
    /// The name is not under the zone's domain: this server does not answer for it (REFUSED).
    NotOurs,
}

/// One ready endpoint as DNS gives it.
#[derive(Clone, Debug)]
struct Target {
    /// `{instance}.{svc}.service.{domain}`: the SRV target, answered with `ip`.
    name: Name,
    /// The address, when the endpoint's host is an IP address (a host name gets no A record).
    ip: Option<IpAddr>,
    port: u16,
}

/// The services' ready endpoints under one domain, as DNS names.
///
/// # Names
///
/// - `{svc}.service.{domain}`: A and AAAA records, one per distinct IP address among the
///   service's ready endpoints; SRV records, one per endpoint (priority 0, weight 1, its port,
///   target `{instance}.{svc}.service.{domain}`), with the targets' addresses as additional
///   records.
/// - `{instance}.{svc}.service.{domain}`: the A or AAAA record of that one endpoint.
///
/// Names match without regard to ASCII case. A service with no ready endpoint still exists
/// (its names answer with no records) as long as its endpoints record does; a name under the
/// domain that names no service or endpoint is NXDOMAIN. A service or instance name that is not
/// a valid DNS label sequence (a label over 63 bytes, a name over 255) has no DNS name, and an
/// endpoint whose host is not an IP address gets SRV records but no address record.
#[derive(Clone, Debug)]
pub struct Zone {
    domain: Name,
    ttl: u32,
    /// By the lowercase service name (`{svc}.service.{domain}`).
    services: BTreeMap<Name, Vec<Target>>,
    /// By the lowercase target name.
    targets: BTreeMap<Name, (Option<IpAddr>, Name)>,
}

impl Zone {
    /// An empty zone for `domain` (such as `cca`), whose records live `ttl` seconds.
    ///
    /// # Errors
    ///
    /// When `domain` is not a valid DNS name.
    pub fn new(domain: &str, ttl: u32) -> Result<Self, hickory_server::proto::ProtoError> {
        let mut domain = Name::from_utf8(domain)?.to_lowercase();
        domain.set_fqdn(true);
        Ok(Zone {
            domain,
            ttl,
            services: BTreeMap::new(),
            targets: BTreeMap::new(),
        })
    }

    /// The domain the zone answers for.
    pub fn domain(&self) -> &Name {
        &self.domain
    }

    /// A zone of the same domain and TTL with no services.
    pub fn emptied(&self) -> Zone {
        Zone {
            domain: self.domain.clone(),
            ttl: self.ttl,
            services: BTreeMap::new(),
            targets: BTreeMap::new(),
        }
    }

    /// Sets service `service`'s endpoints (`None`: its record is gone, and so are its names).
    pub fn set(&mut self, service: &str, endpoints: Option<&Endpoints>) {
        let Some(name) = self.service_name(service) else {
            return;
        };
        if let Some(old) = self.services.remove(&name) {
            for target in old {
                self.targets.remove(&target.name);
            }
        }
        let Some(endpoints) = endpoints else {
            return;
        };
        let mut targets = Vec::new();
        for endpoint in &endpoints.endpoints {
            let Some((host, port)) = split_address(&endpoint.address) else {
                continue;
            };
            let Ok(label) = Name::from_utf8(&endpoint.instance) else {
                continue;
            };
            let Ok(target) = label.to_lowercase().append_domain(&name) else {
                continue;
            };
            let ip = host.parse::<IpAddr>().ok();
            self.targets.insert(target.clone(), (ip, name.clone()));
            targets.push(Target {
                name: target,
                ip,
                port,
            });
        }
        self.services.insert(name, targets);
    }

    /// What the zone answers to a question for `name` of type `kind`.
    pub fn answer(&self, name: &Name, kind: RecordType) -> Answer {
        let mut asked = name.to_lowercase();
        asked.set_fqdn(true);
        if !self.domain.zone_of(&asked) {
            return Answer::NotOurs;
        }
        if let Some(targets) = self.services.get(&asked) {
            return self.service_records(&asked, targets, kind);
        }
        if let Some((ip, _)) = self.targets.get(&asked) {
            let answers = ip
                .iter()
                .filter_map(|ip| self.address_record(&asked, *ip, kind))
                .collect();
            return Answer::Records {
                answers,
                additional: Vec::new(),
            };
        }
        Answer::NoSuchName
    }

    fn service_records(&self, name: &Name, targets: &[Target], kind: RecordType) -> Answer {
        let mut answers = Vec::new();
        let mut additional = Vec::new();
        match kind {
            RecordType::SRV => {
                for target in targets {
                    let srv = SRV::new(0, 1, target.port, target.name.clone());
                    answers.push(Record::from_rdata(name.clone(), self.ttl, RData::SRV(srv)));
                    if let Some(ip) = target.ip {
                        let kind = match ip {
                            IpAddr::V4(_) => RecordType::A,
                            IpAddr::V6(_) => RecordType::AAAA,
                        };
                        additional.extend(self.address_record(&target.name, ip, kind));
                    }
                }
            }
            _ => {
                let mut seen: Vec<IpAddr> = Vec::new();
                for ip in targets.iter().filter_map(|t| t.ip) {
                    if !seen.contains(&ip) {
                        seen.push(ip);
                        answers.extend(self.address_record(name, ip, kind));
                    }
                }
            }
        }
        Answer::Records {
            answers,
            additional,
        }
    }

    /// An A or AAAA record of `name`, if `ip` is of the asked family.
    fn address_record(&self, name: &Name, ip: IpAddr, kind: RecordType) -> Option<Record> {
        let rdata = match (ip, kind) {
            (IpAddr::V4(v4), RecordType::A) => RData::A(A(v4)),
            (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(v6)),
            _ => return None,
        };
        Some(Record::from_rdata(name.clone(), self.ttl, rdata))
    }

    /// `{service}.service.{domain}`, lowercase; `None` when the service name makes no DNS name.
    fn service_name(&self, service: &str) -> Option<Name> {
        let relative = Name::from_utf8(format!("{service}.{SERVICE_LABEL}")).ok()?;
        relative.to_lowercase().append_domain(&self.domain).ok()
    }
}

/// `host:port` (an IPv6 host in brackets) into host and port.
fn split_address(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
#[path = "zone_tests.rs"]
mod tests;
