//! Prints how many DNS questions per second one `DnsServer` answers on loopback, under the load
//! of `dnsperf` (Debian package `dnsperf`), a real DNS client.
//!
//! `cargo run --release -p ccattler-benches --bin dns_figures [-- SERVICES ENDPOINTS RUNS]`
//!
//! The store holds SERVICES services (default 1,000) of ENDPOINTS ready endpoints each (default
//! 10). The questions cycle through every service's A and SRV names and one unknown name in
//! ten (NXDOMAIN). Each of RUNS runs (default 3) lasts 10 s with 4 clients and at most 200
//! questions outstanding; the median of the runs is printed last.

use std::fmt::Write as _;
use std::process::Command;

use ccattler_core::FactStore;
use ccattler_core::schema::{self, Endpoint, Endpoints, keys};
use ccattler_runtime::dns::{DnsConfig, DnsServer};
use ccattler_store::MemoryStore;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let services = args.first().copied().unwrap_or(1_000);
    let per_service = args.get(1).copied().unwrap_or(10);
    let runs = args.get(2).copied().unwrap_or(3).max(1);
    if Command::new("dnsperf").arg("-h").output().is_err() {
        return Err("dnsperf is not installed: `apt-get install dnsperf` (Debian)".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let server = runtime.block_on(start(services, per_service))?;
    let port = server.local_addr().port();

    let mut questions = String::new();
    for i in 0..services {
        writeln!(questions, "svc-{i}.service.cca A")?;
        writeln!(questions, "svc-{i}.service.cca SRV")?;
        if i % 5 == 0 {
            writeln!(questions, "missing-{i}.service.cca A")?;
        }
    }
    let data = tempfile::NamedTempFile::new()?;
    std::fs::write(data.path(), questions)?;

    let mut rates = Vec::new();
    for run in 1..=runs {
        let output = Command::new("dnsperf")
            .args(["-s", "127.0.0.1", "-p", &port.to_string(), "-l", "10"])
            .args(["-c", "4", "-q", "200", "-d"])
            .arg(data.path())
            .output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let figure = |label: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(label))
                .map(|rest| rest.trim().to_owned())
        };
        let qps: f64 = figure("Queries per second:")
            .ok_or_else(|| format!("dnsperf printed no rate:\n{text}"))?
            .parse()?;
        let lost = figure("Queries lost:").unwrap_or_default();
        let latency = figure("Average Latency (s):").unwrap_or_default();
        println!("run {run}: {qps:.0} answers/s (lost {lost}; average latency {latency} s)");
        rates.push(qps);
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "dns: {services} services x {per_service} endpoints, median {:.0} answers/s over {runs} runs",
        rates[rates.len() / 2]
    );
    runtime.block_on(server.shutdown());
    Ok(())
}

/// A store of `services` services with `per_service` ready endpoints each, and a DNS server on
/// a free loopback port answering for it.
async fn start(services: usize, per_service: usize) -> Result<DnsServer, Error> {
    let store = MemoryStore::new();
    for i in 0..services {
        let endpoints = (0..per_service)
            .map(|e| Endpoint {
                address: format!("10.{}.{}.{}:{}", i / 256 % 256, i % 256, e % 256, 20000 + e),
                instance: format!("svc-{i}-{e}"),
                node: format!("n{e}"),
            })
            .collect();
        let key = keys::endpoints(&format!("svc-{i}"))?;
        store
            .put(&key, schema::encode(&Endpoints { endpoints }))
            .await?;
    }
    Ok(DnsServer::start(store, DnsConfig::new("127.0.0.1:0".parse()?)).await?)
}
