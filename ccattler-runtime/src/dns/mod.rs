//! Service discovery over DNS (feature `dns`): [`DnsServer`] answers `web.service.cca` with the
//! addresses and ports of service `web`'s ready instances, kept current from the store.
//!
//! Start with [`DnsServer::start`]; [`Zone`] holds the naming rules (what each name answers,
//! NXDOMAIN, refusals), pure and testable without a socket.

mod server;
mod zone;

pub use server::{DnsConfig, DnsError, DnsServer};
pub use zone::{Answer, SERVICE_LABEL, Zone};
