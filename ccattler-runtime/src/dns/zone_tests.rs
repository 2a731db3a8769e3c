use std::str::FromStr;

use ccattler_core::schema::{Endpoint, Endpoints};
use hickory_server::proto::rr::{Name, RData, RecordType};

use super::{Answer, Zone};

fn endpoints(list: &[(&str, &str)]) -> Endpoints {
    Endpoints {
        endpoints: list
            .iter()
            .map(|(address, instance)| Endpoint {
                address: (*address).to_owned(),
                instance: (*instance).to_owned(),
                node: "n1".to_owned(),
            })
            .collect(),
    }
}

fn name(text: &str) -> Name {
    Name::from_str(text).expect("a valid name")
}

fn records(answer: Answer) -> (Vec<String>, Vec<String>) {
    let Answer::Records {
        answers,
        additional,
    } = answer
    else {
        panic!("expected records, got {answer:?}");
    };
    let show = |list: Vec<hickory_server::proto::rr::Record>| {
        list.into_iter()
            .map(|r| format!("{} {}", r.name, r.data))
            .collect()
    };
    (show(answers), show(additional))
}

#[test]
fn a_service_answers_its_distinct_addresses_and_one_srv_per_endpoint() {
    let mut zone = Zone::new("cca", 5).expect("domain");
    zone.set(
        "web",
        Some(&endpoints(&[
            ("10.0.0.1:20000", "web-a"),
            ("10.0.0.1:20001", "web-b"),
            ("[fd00::2]:20000", "web-c"),
        ])),
    );
    let (a, _) = records(zone.answer(&name("web.service.cca."), RecordType::A));
    assert_eq!(a, ["web.service.cca. 10.0.0.1"]);
    let (aaaa, _) = records(zone.answer(&name("WEB.Service.CCA"), RecordType::AAAA));
    assert_eq!(aaaa, ["web.service.cca. fd00::2"]);
    let (srv, additional) = records(zone.answer(&name("web.service.cca."), RecordType::SRV));
    assert_eq!(
        srv,
        [
            "web.service.cca. 0 1 20000 web-a.web.service.cca.",
            "web.service.cca. 0 1 20001 web-b.web.service.cca.",
            "web.service.cca. 0 1 20000 web-c.web.service.cca.",
        ]
    );
    assert_eq!(
        additional,
        [
            "web-a.web.service.cca. 10.0.0.1",
            "web-b.web.service.cca. 10.0.0.1",
            "web-c.web.service.cca. fd00::2",
        ]
    );
    let (one, _) = records(zone.answer(&name("web-b.web.service.cca."), RecordType::A));
    assert_eq!(one, ["web-b.web.service.cca. 10.0.0.1"]);
}

#[test]
fn unknown_names_are_nxdomain_and_other_domains_are_not_ours() {
    let mut zone = Zone::new("cca", 5).expect("domain");
    zone.set("web", Some(&endpoints(&[("10.0.0.1:80", "web-a")])));
    assert_eq!(
        zone.answer(&name("api.service.cca."), RecordType::A),
        Answer::NoSuchName
    );
    assert_eq!(
        zone.answer(&name("example.com."), RecordType::A),
        Answer::NotOurs
    );
    // A service whose endpoints record is gone loses its names, targets included.
    zone.set("web", None);
    assert_eq!(
        zone.answer(&name("web.service.cca."), RecordType::A),
        Answer::NoSuchName
    );
    assert_eq!(
        zone.answer(&name("web-a.web.service.cca."), RecordType::A),
        Answer::NoSuchName
    );
}

#[test]
fn a_service_without_ready_endpoints_exists_with_no_records() {
    let mut zone = Zone::new("cca", 5).expect("domain");
    zone.set("web", Some(&endpoints(&[])));
    let (a, additional) = records(zone.answer(&name("web.service.cca."), RecordType::A));
    assert!(a.is_empty() && additional.is_empty());
}

#[test]
fn endpoints_that_change_replace_the_old_targets() {
    let mut zone = Zone::new("cca", 5).expect("domain");
    zone.set("web", Some(&endpoints(&[("10.0.0.1:80", "web-a")])));
    zone.set("web", Some(&endpoints(&[("10.0.0.2:80", "web-b")])));
    assert_eq!(
        zone.answer(&name("web-a.web.service.cca."), RecordType::A),
        Answer::NoSuchName
    );
    let (a, _) = records(zone.answer(&name("web.service.cca."), RecordType::A));
    assert_eq!(a, ["web.service.cca. 10.0.0.2"]);
}

#[test]
fn a_host_name_endpoint_gets_srv_but_no_address() {
    let mut zone = Zone::new("cca", 5).expect("domain");
    zone.set("web", Some(&endpoints(&[("host-1:8080", "web-a")])));
    let (a, _) = records(zone.answer(&name("web.service.cca."), RecordType::A));
    assert!(a.is_empty());
    let (srv, additional) = records(zone.answer(&name("web.service.cca."), RecordType::SRV));
    assert_eq!(srv, ["web.service.cca. 0 1 8080 web-a.web.service.cca."]);
    assert!(additional.is_empty());
    let kinds = |answer: Answer| match answer {
        Answer::Records { answers, .. } => answers
            .iter()
            .map(|r| matches!(r.data, RData::SRV(_)))
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    assert_eq!(
        kinds(zone.answer(&name("web.service.cca."), RecordType::SRV)),
        [true]
    );
}
