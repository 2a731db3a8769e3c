//! The address a node advertises when `cca agent --address` is not given: the local address of
//! this host's route to its server. Other hosts reach the server the way this host does, so
//! they can reach this host at the address its packets to the server leave from; a node whose
//! server is on loopback advertises loopback, and only then.
//!
//! No packet is sent: connecting a UDP socket only asks the kernel which route, and so which
//! source address, it would use.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// The source address of the route to the first of `servers` (URLs such as
/// `http://10.0.0.1:7070`) that has one, or `None` when no server's host resolves or is
/// routable from here.
pub async fn route_source(servers: &[String]) -> Option<IpAddr> {
    for server in servers {
        let Ok(uri) = server.parse::<hyper::Uri>() else {
            continue;
        };
        let Some(host) = uri.host() else {
            continue;
        };
        let port = uri.port_u16().unwrap_or(80);
        let Ok(addresses) = tokio::net::lookup_host((host.trim_matches(['[', ']']), port)).await
        else {
            continue;
        };
        if let Some(source) = addresses.into_iter().find_map(source_towards) {
            return Some(source);
        }
    }
    None
}

/// The local address the kernel would send packets to `peer` from.
fn source_towards(peer: SocketAddr) -> Option<IpAddr> {
    let any: IpAddr = match peer {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let socket = UdpSocket::bind((any, 0)).ok()?;
    socket.connect(peer).ok()?;
    let source = socket.local_addr().ok()?.ip();
    (!source.is_unspecified()).then_some(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_on_loopback_is_reached_from_loopback() {
        let servers = ["http://127.0.0.1:7070".to_owned()];
        assert_eq!(
            route_source(&servers).await,
            Some(Ipv4Addr::LOCALHOST.into())
        );
        let named = ["http://localhost:7070".to_owned()];
        assert!(
            route_source(&named)
                .await
                .is_some_and(|ip| ip.is_loopback())
        );
    }

    #[tokio::test]
    async fn a_server_that_is_no_address_is_skipped_for_the_next() {
        let servers = [
            "not a url".to_owned(),
            "http://host.invalid:7070".to_owned(),
            "http://127.0.0.1:7070".to_owned(),
        ];
        assert_eq!(
            route_source(&servers).await,
            Some(Ipv4Addr::LOCALHOST.into())
        );
        assert_eq!(route_source(&["not a url".to_owned()]).await, None);
    }
}
