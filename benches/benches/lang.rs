//! The `.cca` front end: check (parse, shape checks, compile) of a 10,000-service file, and
//! rejection of 10 MB of garbage with a bounded number of diagnostics.
//!
//! `cargo bench -p ccattler-benches --bench lang`

use ccattler_controllers::lang::{self, SourceFile};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// A file of `n` services, about 145 bytes each (1.45 MB for 10,000).
fn services(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "service team/svc-{i} {{\n    image nginx:1.28\n    instances 3\n    \
                 expose 8080 http\n    resources {{\n        cpu 500m\n        memory 256Mi\n    \
                 }}\n}}\n\n"
            )
        })
        .collect()
}

/// `len` pseudo-random bytes read as (lossy) UTF-8.
fn garbage(len: usize) -> String {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn check_services(c: &mut Criterion) {
    let text = services(10_000);
    let file = SourceFile::new("big.cca", text.as_str());
    let mut group = c.benchmark_group("lang");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function("check_10k_services", |b| {
        b.iter(|| {
            let compiled = lang::check(&file).expect("the generated file is valid");
            assert_eq!(compiled.services.len(), 10_000);
            compiled
        })
    });
    group.bench_function("check_10k_services_to_facts", |b| {
        b.iter(|| lang::check(&file).expect("valid").to_facts())
    });
    group.finish();
}

fn reject_garbage(c: &mut Criterion) {
    let mut group = c.benchmark_group("lang");
    group.sample_size(20);
    let inputs = [
        ("reject_10mb_random_bytes", garbage(10 << 20)),
        (
            "reject_10mb_unclosed_blocks",
            "a {\n".repeat((10 << 20) / 4),
        ),
        (
            "reject_10mb_unknown_fields",
            "foo 1\n".repeat((10 << 20) / 6),
        ),
    ];
    for (name, text) in inputs {
        let file = SourceFile::new("garbage.cca", text);
        group.throughput(Throughput::Bytes(file.text().len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let diagnostics = lang::check(&file).expect_err("garbage is rejected");
                assert!(diagnostics.len() <= diagnostics.cap());
                // Rendering is part of rejecting: it is what the user sees.
                diagnostics.to_string()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, check_services, reject_garbage);
criterion_main!(benches);
