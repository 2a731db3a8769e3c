//! `host:port` as every runtime reports an instance's address.

/// `host:port`, with an IPv6 host in brackets (`[fd00::1]:8080`); a host already in brackets,
/// an IPv4 address or a name is used as it is.
pub(crate) fn served_at(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::served_at;

    #[test]
    fn an_ipv6_host_is_bracketed_once() {
        assert_eq!(served_at("127.0.0.1", 8080), "127.0.0.1:8080");
        assert_eq!(served_at("10.1.2.3", 20001), "10.1.2.3:20001");
        assert_eq!(served_at("fd00::3", 80), "[fd00::3]:80");
        assert_eq!(served_at("[fd00::3]", 80), "[fd00::3]:80");
        assert_eq!(served_at("node-1.example", 80), "node-1.example:80");
    }
}
