//! Each class of syntax and shape error, rendered, as insta snapshots; several errors of one file
//! are all reported; the cap bounds them.

use ccattler_controllers::lang::{self, Diagnostics, SourceFile};

fn diagnose(text: &str) -> Diagnostics {
    let file = SourceFile::new("app.cca", text);
    let (_, diags) = lang::parse_with_diagnostics(&file);
    assert!(diags.has_errors(), "expected errors in:\n{text}");
    diags
}

/// Renders the diagnostics of `text`, checking that they are all of class `code`.
fn render(code: &str, text: &str) -> String {
    let diags = diagnose(text);
    for d in &diags {
        assert_eq!(d.code, code, "unexpected class in:\n{diags}");
    }
    diags.to_string()
}

macro_rules! snapshot_error {
    ($name:ident, $code:literal, $text:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(render($code, $text));
        }
    };
}

snapshot_error!(
    unknown_field_with_suggestion,
    "cca::unknown-field",
    "service web {\n    imgae nginx:1.28\n}\n"
);
snapshot_error!(
    unknown_field_in_wrong_block,
    "cca::unknown-field",
    "service web {\n    cpu 500m\n}\n"
);
snapshot_error!(
    unknown_field_missing_close_brace,
    "cca::unknown-field",
    "service web {\n    image a\n\nservice db {\n    image b\n}\n}\n"
);
snapshot_error!(unknown_top_level, "cca::unknown-field", "servce web {\n}\n");
snapshot_error!(
    missing_argument,
    "cca::missing-argument",
    "service web {\n    instances\n}\n"
);
snapshot_error!(
    extra_argument,
    "cca::extra-argument",
    "volume data {\n    size 10Gi persistent true\n}\n"
);
snapshot_error!(
    word_where_number_expected,
    "cca::wrong-argument",
    "service web {\n    instances three\n}\n"
);
snapshot_error!(
    number_where_path_expected,
    "cca::wrong-argument",
    "service web {\n    readiness {\n        http 8080\n    }\n}\n"
);
snapshot_error!(
    bad_enum_value,
    "cca::wrong-argument",
    "service web {\n    restart on-failure\n}\n"
);
snapshot_error!(
    repeated_field,
    "cca::repeated-field",
    "service web {\n    image nginx:1.27\n    instances 2\n    image nginx:1.28\n}\n"
);
snapshot_error!(
    conflicting_probe_checks,
    "cca::conflicting-fields",
    "service web {\n    liveness {\n        http /healthz\n        tcp\n    }\n}\n"
);
snapshot_error!(
    missing_block,
    "cca::missing-block",
    "service web {\n    resources\n}\n"
);
snapshot_error!(
    unexpected_block,
    "cca::unexpected-block",
    "service web {\n    image nginx {\n    }\n}\n"
);
snapshot_error!(
    unterminated_string,
    "cca::unterminated-string",
    "service web {\n    command \"nginx -g\n}\n"
);
snapshot_error!(
    unterminated_triple_string,
    "cca::unterminated-triple-string",
    "service web {\n    config {\n        file /etc/x \"\"\"\nline\n"
);
snapshot_error!(
    bad_escape,
    "cca::bad-escape",
    "service web {\n    command \"C:\\path\"\n}\n"
);
snapshot_error!(
    stray_semicolon,
    "cca::stray-semicolon",
    "service web {\n    image nginx; instances 3\n}\n"
);
snapshot_error!(
    stray_comma,
    "cca::stray-comma",
    "network {\n    allow web -> db, port 5432\n}\n"
);
snapshot_error!(
    unexpected_character,
    "cca::unexpected-character",
    "service web {\n    image $nginx\n}\n"
);
snapshot_error!(
    unclosed_brace,
    "cca::unclosed-brace",
    "service web {\n    image nginx\n"
);
snapshot_error!(
    unexpected_close_brace,
    "cca::unexpected-close-brace",
    "service web {\n    image nginx\n}\n}\n"
);
snapshot_error!(
    after_close_brace,
    "cca::after-close-brace",
    "service web {\n    image nginx\n} service db {\n}\n"
);
snapshot_error!(
    expected_keyword,
    "cca::expected-keyword",
    "service web {\n    8080 http\n}\n"
);

#[test]
fn nesting_too_deep() {
    let mut text = String::new();
    for _ in 0..40 {
        text.push_str("a {\n");
    }
    for _ in 0..40 {
        text.push_str("}\n");
    }
    let diags = diagnose(&text);
    let deep: Vec<_> = diags
        .iter()
        .filter(|d| d.code == "cca::nesting-too-deep")
        .collect();
    assert_eq!(deep.len(), 1, "{diags}");
    let file = SourceFile::new("app.cca", text.as_str());
    let mut only = Diagnostics::new(file);
    only.push(deep[0].clone());
    insta::assert_snapshot!(only.to_string());
}

#[test]
fn several_errors_are_all_reported() {
    let text = "service web {\n    imgae nginx\n    instances -\n    restart sometimes;\n    expose 8080 http\n    expose 8080 udp\n}\n\nvolume v {\n    persistent maybe\n}\n";
    let diags = diagnose(text);
    assert_eq!(
        diags.codes(),
        [
            "cca::unexpected-character",
            "cca::stray-semicolon",
            "cca::unknown-field",
            "cca::missing-argument",
            "cca::wrong-argument",
            "cca::wrong-argument",
            "cca::wrong-argument",
        ]
    );
    insta::assert_snapshot!(diags.to_string());
}

#[test]
fn error_cap() {
    let text = "service web {\n    imgae x\n}\n".repeat(200);
    let diags = diagnose(&text);
    assert_eq!(diags.len(), Diagnostics::DEFAULT_CAP);
    assert!(diags.is_truncated());
    let rendered = diags.to_string();
    let tail: Vec<&str> = rendered.lines().rev().take(12).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    insta::assert_snapshot!(tail.join("\n"));
}

#[test]
fn diagnostics_is_an_error() {
    let err: Box<dyn std::error::Error> = Box::new(diagnose("servic x {\n}\n"));
    assert!(err.to_string().contains("app.cca:1:1"));
}
