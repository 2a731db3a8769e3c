//! A node's [`NodeRules`] as the text of one nftables table, for `nft -f`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;

use ccattler_core::schema::NodeRules;

/// The name of node `node`'s table: `ccattler_{node}`, with every character nftables does not
/// take in a name replaced by `_` and, when any was, a hash of the name appended (so `n-1` and
/// `n_1` never share a table).
pub fn table_name(node: &str) -> String {
    let clean: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean == node {
        format!("ccattler_{node}")
    } else {
        let hash = crate::names::stable_hash(node);
        format!("ccattler_{clean}_{:08x}", hash as u32)
    }
}

/// The script that replaces table `table` (family `inet`) by `rules` in one transaction: the
/// table is declared (so that deleting it works when it does not exist yet), deleted and
/// written anew, so the kernel holds the old table or the new one, never a mix.
///
/// The table's `input` chain judges connections to the node's own sockets (the host network):
/// traffic from the node itself (`lo`) passes; TCP and UDP to a guarded port pass when their
/// source address is in the guard's set, and are refused otherwise (TCP with a reset, UDP with
/// ICMP port unreachable); everything else passes. Its `forward` chain judges the same way the
/// connections whose destination was translated from a guarded host port to a container (CNI's
/// `portmap`), by the port they were sent to, in the direction they were opened (the
/// container's answers pass). An address in a set that is not an IP address is left out.
pub fn render(table: &str, rules: &NodeRules) -> String {
    let mut guarded = BTreeSet::new();
    let mut allow4 = BTreeSet::new();
    let mut allow6 = BTreeSet::new();
    for guard in &rules.guards {
        guarded.insert(guard.port);
        for address in rules.sets.get(guard.allow).into_iter().flatten() {
            match address.parse::<IpAddr>() {
                Ok(IpAddr::V4(ip)) => allow4.insert(format!("{} . {ip}", guard.port)),
                Ok(IpAddr::V6(ip)) => allow6.insert(format!("{} . {ip}", guard.port)),
                Err(_) => false,
            };
        }
    }
    let mut out = removal(table);
    let _ = writeln!(out, "table inet {table} {{");
    set(&mut out, "guarded", "inet_service", &guarded);
    set(&mut out, "allow4", "inet_service . ipv4_addr", &allow4);
    set(&mut out, "allow6", "inet_service . ipv6_addr", &allow6);
    let before = [
        "iif \"lo\" accept",
        "meta l4proto { tcp, udp } th dport != @guarded accept",
    ];
    chain(&mut out, "input", &before, "", "th dport");
    let when = "ct direction original ct status dnat ";
    chain(&mut out, "forward", &[], when, "ct original proto-dst");
    out.push_str("}\n");
    out
}

/// The script that removes table `table` (family `inet`), whether or not it exists.
pub fn removal(table: &str) -> String {
    format!("table inet {table}\ndelete table inet {table}\n")
}

/// A base chain on `hook` that runs `before`, then judges the packets that match `when` by the
/// port `port` names: let through from the guard's addresses, refused when guarded.
fn chain(out: &mut String, hook: &str, before: &[&str], when: &str, port: &str) {
    let _ = writeln!(out, "\tchain {hook} {{");
    let _ = writeln!(
        out,
        "\t\ttype filter hook {hook} priority filter; policy accept;"
    );
    for line in before {
        let _ = writeln!(out, "\t\t{line}");
    }
    let both = "meta l4proto { tcp, udp }";
    let _ = writeln!(out, "\t\t{when}{both} {port} . ip saddr @allow4 accept");
    let _ = writeln!(out, "\t\t{when}{both} {port} . ip6 saddr @allow6 accept");
    let _ = writeln!(
        out,
        "\t\t{when}meta l4proto tcp {port} @guarded reject with tcp reset"
    );
    let _ = writeln!(out, "\t\t{when}meta l4proto udp {port} @guarded reject");
    out.push_str("\t}\n");
}

fn set(out: &mut String, name: &str, kind: &str, elements: &BTreeSet<impl std::fmt::Display>) {
    let _ = writeln!(out, "\tset {name} {{\n\t\ttype {kind}");
    if !elements.is_empty() {
        let list: Vec<String> = elements.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "\t\telements = {{ {} }}", list.join(", "));
    }
    out.push_str("\t}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::schema::PortGuard;

    fn guard(port: u16, allow: usize) -> PortGuard {
        PortGuard {
            port,
            instance: format!("db-{port}"),
            service: "db".into(),
            declared: 5432,
            allow,
        }
    }

    #[test]
    fn names_are_kept_when_nftables_takes_them() {
        assert_eq!(table_name("n1"), "ccattler_n1");
        assert_eq!(table_name("node-1.a_b"), "ccattler_node-1.a_b");
        let odd = table_name("n 1");
        assert!(odd.starts_with("ccattler_n_1_"), "{odd}");
        assert_ne!(odd, table_name("n_1"));
        assert_ne!(table_name("n 1"), table_name("n:1"));
    }

    #[test]
    fn a_rule_set_is_one_table_replaced_in_one_script() {
        let rules = NodeRules {
            sets: vec![
                vec!["10.0.0.1".into(), "fd00::2".into(), "not-an-ip".into()],
                vec![],
            ],
            guards: vec![guard(20000, 0), guard(20001, 1)],
        };
        let script = render("ccattler_n1", &rules);
        assert!(script.starts_with(
            "table inet ccattler_n1\ndelete table inet ccattler_n1\ntable inet ccattler_n1 {\n"
        ));
        assert!(script.contains("elements = { 20000, 20001 }"));
        assert!(script.contains("elements = { 20000 . 10.0.0.1 }"));
        assert!(script.contains("elements = { 20000 . fd00::2 }"));
        assert!(!script.contains("not-an-ip"));
    }

    #[test]
    fn empty_sets_have_no_elements_line() {
        let script = render("t", &NodeRules::default());
        assert!(!script.contains("elements"));
        assert!(script.contains("set allow6 {\n\t\ttype inet_service . ipv6_addr\n\t}"));
    }
}
