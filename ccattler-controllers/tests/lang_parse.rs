//! Every construct of the `.cca` language parses with no diagnostic, and the example document
//! (`tests/data/example.cca`, which uses each of them) gives the expected tree.

use ccattler_controllers::lang::{self, ArgKind, Document, SourceFile, Statement};

/// An indented outline of a tree: one line per statement, args with their kind, spans as `@a..b`.
fn outline(doc: &Document) -> String {
    fn comments(out: &mut String, pad: &str, cs: &[lang::Comment]) {
        for c in cs {
            out.push_str(&format!("{pad}#{} @{}\n", c.text, c.span));
        }
    }
    fn statement(out: &mut String, st: &Statement, depth: usize) {
        let pad = "  ".repeat(depth);
        comments(out, &pad, &st.comments);
        out.push_str(&format!("{pad}{} @{}", st.name(), st.span));
        for a in &st.args {
            let shown = match &a.kind {
                ArgKind::Word(s) => format!("word({s})"),
                ArgKind::Path(s) => format!("path({s})"),
                ArgKind::Number(s) => format!("number({s})"),
                ArgKind::Str(s) => format!("str({s:?})"),
                ArgKind::Block3(s) => format!("block3({s:?})"),
                ArgKind::Op(op) => format!("op({op})"),
            };
            out.push_str(&format!(" {shown}"));
        }
        if let Some(c) = &st.trailing_comment {
            out.push_str(&format!("  #{}", c.text));
        }
        out.push('\n');
        if let Some(b) = &st.block {
            for child in &b.statements {
                statement(out, child, depth + 1);
            }
            comments(out, &"  ".repeat(depth + 1), &b.trailing_comments);
            if let Some(c) = &b.close_comment {
                out.push_str(&format!("{pad}}} #{}\n", c.text));
            }
        }
    }
    let mut out = String::new();
    for st in &doc.statements {
        statement(&mut out, st, 0);
    }
    comments(&mut out, "", &doc.trailing_comments);
    out
}

fn parse_ok(text: &str) -> Document {
    let file = SourceFile::new("t.cca", text);
    match lang::parse(&file) {
        Ok(doc) => doc,
        Err(diags) => panic!("unexpected diagnostics for:\n{text}\n{diags}"),
    }
}

const EXAMPLE: &str = include_str!("data/example.cca");

#[test]
fn language_md_example_parses_cleanly() {
    let doc = parse_ok(EXAMPLE);
    assert_eq!(doc.statements.len(), 4);
    insta::assert_snapshot!(outline(&doc));
}

#[test]
fn language_md_example_is_already_canonical() {
    let doc = parse_ok(EXAMPLE);
    assert_eq!(lang::format(&doc), EXAMPLE);
}

/// One snippet per construct, each a complete file.
const CONSTRUCTS: &[(&str, &str)] = &[
    ("service path name", "service team/web {\n}\n"),
    ("image word", "service a {\n    image nginx:1.28\n}\n"),
    (
        "image string",
        "service a {\n    image \"registry.example/app:2\"\n}\n",
    ),
    (
        "image registry word",
        "service a {\n    image registry.example/app:2\n}\n",
    ),
    (
        "command",
        "service a {\n    command \"nginx -g 'daemon off;'\"\n}\n",
    ),
    ("instances", "service a {\n    instances 3\n}\n"),
    ("restart always", "service a {\n    restart always\n}\n"),
    (
        "restart on_failure",
        "service a {\n    restart on_failure\n}\n",
    ),
    ("restart never", "service a {\n    restart never\n}\n"),
    ("expose plain", "service a {\n    expose 8080\n}\n"),
    (
        "expose http",
        "service a {\n    expose 8080 http\n    expose 9090 tcp\n}\n",
    ),
    (
        "expose external",
        "service a {\n    expose external 443\n    expose external 80 http\n}\n",
    ),
    (
        "resources",
        "service a {\n    resources {\n        cpu 500m\n        memory 512Mi\n    }\n}\n",
    ),
    (
        "health http",
        "service a {\n    health {\n        http /path\n        every 10s\n        timeout 2s\n    }\n}\n",
    ),
    (
        "health tcp",
        "service a {\n    health {\n        tcp\n    }\n}\n",
    ),
    (
        "startup probe all fields",
        "service a {\n    startup {\n        exec \"pg_isready\"\n        port 5432\n        every 5s\n        timeout 1s\n        failure_threshold 3\n        success_threshold 1\n        initial_delay 10s\n    }\n}\n",
    ),
    (
        "liveness multi-segment path",
        "service a {\n    liveness {\n        http /health/live/deep\n    }\n}\n",
    ),
    (
        "readiness",
        "service a {\n    readiness {\n        http /health/ready\n        port 8081\n    }\n}\n",
    ),
    (
        "placement",
        "service a {\n    placement {\n        architecture amd64\n        zone spread\n        require disk = ssd\n        require kubernetes.io/arch = arm64\n        prefer gpu = 2\n        accept dedicated-compute\n        accept payments.pending\n    }\n}\n",
    ),
    (
        "placement zone name",
        "service a {\n    placement {\n        zone eu-west-1a\n    }\n}\n",
    ),
    (
        "update",
        "service a {\n    update {\n        max_unavailable 1\n        max_extra 25%\n    }\n}\n",
    ),
    (
        "scale",
        "service a {\n    scale {\n        horizontal {\n            min 2\n            max 10\n            target cpu = 60\n            target memory = 70%\n            stabilization {\n                scale_up 30s\n                scale_down 5m\n            }\n        }\n    }\n}\n",
    ),
    (
        "config",
        "service a {\n    config {\n        env LOG_LEVEL debug\n        env PORT = 8080\n        env GREETING = \"hello world\"\n        file /etc/app.conf \"\"\"\nlisten 8080\nname \"x\"\n\"\"\"\n    }\n}\n",
    ),
    (
        "secret",
        "service a {\n    secret db-password\n    secret tls /etc/tls\n}\n",
    ),
    (
        "init steps",
        "service a {\n    init {\n        exec \"migrate up\"\n        timeout 1m\n        retry 3\n    }\n    init {\n        exec \"seed\"\n    }\n}\n",
    ),
    (
        "volume mounts",
        "service a {\n    volume pgdata /var/lib/postgresql/data\n    volume logs /var/log\n}\n",
    ),
    ("stateful", "service a {\n    stateful\n}\n"),
    (
        "volume block",
        "volume pgdata {\n    size 20Gi\n    persistent true\n}\n\nvolume scratch {\n    persistent false\n}\n",
    ),
    (
        "network",
        "network {\n    allow web -> db port 5432\n    deny team/web -> team/db\n    allow a->b\n}\n",
    ),
    (
        "comments everywhere",
        "# top\nservice a { # after brace\n    # above\n    image x # after\n    # before close\n} # after close\n# end\n",
    ),
    (
        "one-line block",
        "service a {\n    update { max_extra 2 }\n}\n",
    ),
    ("crlf line ends", "service a {\r\n    image x\r\n}\r\n"),
    ("empty file", ""),
];

#[test]
fn every_construct_parses_without_diagnostics() {
    for (name, text) in CONSTRUCTS {
        let file = SourceFile::new("t.cca", *text);
        let (doc, diags) = lang::parse_with_diagnostics(&file);
        assert!(diags.is_empty(), "{name}: unexpected diagnostics\n{diags}");
        let again = lang::parse_with_diagnostics(&SourceFile::new("t.cca", lang::format(&doc))).0;
        assert!(
            doc.same_tree(&again),
            "{name}: format round trip changed the tree"
        );
    }
}

#[test]
fn constructs_outline() {
    let mut all = String::new();
    for (name, text) in CONSTRUCTS {
        all.push_str(&format!("== {name}\n{}", outline(&parse_ok(text))));
    }
    insta::assert_snapshot!(all);
}

#[test]
fn key_value_forms_are_normalised() {
    let doc = parse_ok(
        "service a {\n    placement {\n        require disk=ssd\n    }\n}\nnetwork {\n    allow a->b   port   1\n}\n",
    );
    let text = lang::format(&doc);
    assert!(text.contains("require disk = ssd\n"), "{text}");
    assert!(text.contains("allow a -> b port 1\n"), "{text}");
}

#[test]
fn formatter_canonical_layout() {
    let messy = "# head\nservice   web{ # web\nimage nginx   # img\n  health { http /x }\n    config {\n env A \"q\\\"t\\\\\"\n file /f \"\"\"\n  keep   this\n\"\"\"\n}\n}\nvolume v { size 1Gi }\n\n\n\nnetwork {\n}\n# tail\n";
    let doc = parse_ok(messy);
    let formatted = lang::format(&doc);
    insta::assert_snapshot!(formatted);
    let again = lang::format(&parse_ok(&formatted));
    assert_eq!(again, formatted, "formatting is idempotent");
}

#[test]
fn spans_point_at_the_source() {
    let text = "service web {\n    expose external 8080 http\n}\n";
    let doc = parse_ok(text);
    let expose = &doc.statements[0].children()[0];
    let port = &expose.args[1];
    assert_eq!(&text[port.span.start..port.span.end], "8080");
    assert_eq!(
        &text[expose.span.start..expose.span.end],
        "expose external 8080 http"
    );
    let file = SourceFile::new("t.cca", text);
    assert_eq!(file.line_col(port.span.start), (2, 21));
}

#[test]
fn deep_nesting_does_not_overflow() {
    for text in [
        "{".repeat(200_000),
        "a {\n".repeat(100_000),
        "}".repeat(100_000),
    ] {
        let file = SourceFile::new("deep.cca", text);
        let (_, diags) = lang::parse_with_diagnostics(&file);
        assert!(diags.has_errors());
        assert!(diags.len() <= diags.cap());
        let _ = diags.to_string();
    }
}
