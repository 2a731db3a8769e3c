//! A by-hand check of the performance targets, not a timed test (timings on shared machines are
//! noise). Run: `cargo test --release -p ccattler-controllers --test lang_perf -- --ignored --nocapture`.

use std::time::Instant;

use ccattler_controllers::lang::{self, SourceFile};

fn services(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!(
            "service team/svc-{i} {{\n    image nginx:1.28\n    instances 3\n    expose 8080 http\n    resources {{\n        cpu 500m\n        memory 256Mi\n    }}\n}}\n\n"
        ));
    }
    s
}

fn garbage_bytes(len: usize) -> String {
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

fn time(label: &str, text: &str) {
    let file = SourceFile::new("big.cca", text);
    let start = Instant::now();
    let (doc, diags) = lang::parse_with_diagnostics(&file);
    let parsed = start.elapsed();
    let start = Instant::now();
    let rendered = diags.to_string();
    let render = start.elapsed();
    println!(
        "{label}: {} bytes, {} statements, {} diagnostics, parse+check {parsed:?}, render {render:?} ({} bytes)",
        text.len(),
        doc.statements.len(),
        diags.len(),
        rendered.len()
    );
}

#[test]
#[ignore = "measurement, run by hand in release"]
fn measure_services() {
    let text = services(10_000);
    let file = SourceFile::new("big.cca", text.as_str());
    for _ in 0..10 {
        let start = Instant::now();
        let (doc, _) = lang::parse_syntax(&file);
        let syntax = start.elapsed();
        let start = Instant::now();
        let mut diags = lang::Diagnostics::new(file.clone());
        lang::check::check_document(&doc, &mut diags);
        let check = start.elapsed();
        let start = Instant::now();
        drop(doc);
        println!(
            "syntax {syntax:?}, check {check:?}, drop {:?}",
            start.elapsed()
        );
    }
}

#[test]
#[ignore = "measurement, run by hand in release"]
fn measure() {
    let text = services(10_000);
    time("10k services (first parse in the process)", &text);
    time("10k services (again)", &text);
    time("random bytes", &garbage_bytes(10 << 20));
    time("unknown fields", &"foo 1\n".repeat((10 << 20) / 6));
    time(
        "comments only",
        &"# just a comment line\n".repeat((10 << 20) / 22),
    );
    time("unclosed braces", &"a {\n".repeat((10 << 20) / 4));
    time("semicolons", &";".repeat(10 << 20));
}
