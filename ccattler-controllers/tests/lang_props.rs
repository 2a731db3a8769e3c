//! Property tests: the formatter round-trips generated documents and arbitrary text, and no input
//! (arbitrary bytes, arbitrary token soup) makes the parser panic or exceed the diagnostics cap.

use ccattler_controllers::lang::grammar::{self, BlockSpec, Shape};
use ccattler_controllers::lang::{
    self, Arg, ArgKind, Block, Comment, Diagnostics, Document, SourceFile, Span, Statement, Word,
};
use proptest::prelude::*;

/// Draws choices from a proptest-generated list (0 once exhausted), so shrinking the list
/// shrinks the document.
struct Choices<'a> {
    list: &'a [u32],
    at: usize,
}

impl Choices<'_> {
    fn pick(&mut self, n: usize) -> usize {
        let v = self.list.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        v as usize % n.max(1)
    }

    fn one<'b, T>(&mut self, items: &'b [T]) -> &'b T {
        &items[self.pick(items.len())]
    }
}

const WORDS: &[&str] = &[
    "web",
    "team/web",
    "nginx:1.28",
    "payments.pending",
    "dedicated-compute",
    "_x",
    "é1",
];
const PATHS: &[&str] = &[
    "/",
    "/healthz",
    "/health/ready",
    "/var/lib/postgresql/data",
    "/etc/a=b?c",
];
const NUMBERS: &[&str] = &[
    "1", "8080", "500m", "1.5Gi", "60%", "1h30m", "0", "-3", "10s",
];
const STRINGS: &[&str] = &[
    "",
    "hello world",
    "q\"uote",
    "back\\slash",
    "new\nline",
    "tab\there",
    "ünï",
];
const TRIPLES: &[&str] = &[
    "",
    "\nline one\n  line \"two\"\n",
    "ends with quote\"",
    "\\n stays",
];
const COMMENTS: &[&str] = &["", " note", "#hash", " \"quoted\" { } ;"];

fn sp() -> Span {
    Span::default()
}

fn comments(c: &mut Choices<'_>) -> Vec<Comment> {
    let n = [0, 0, 0, 1, 2][c.pick(5)];
    (0..n).map(|_| comment(c)).collect()
}

fn comment(c: &mut Choices<'_>) -> Comment {
    Comment {
        text: (*c.one(COMMENTS)).to_owned(),
        span: sp(),
    }
}

fn maybe_comment(c: &mut Choices<'_>) -> Option<Comment> {
    (c.pick(4) == 0).then(|| comment(c))
}

fn value(shape: Shape, c: &mut Choices<'_>) -> ArgKind {
    let word = |c: &mut Choices<'_>| ArgKind::Word((*c.one(WORDS)).to_owned());
    let text = |c: &mut Choices<'_>| {
        if c.pick(2) == 0 {
            ArgKind::Str((*c.one(STRINGS)).to_owned())
        } else {
            ArgKind::Block3((*c.one(TRIPLES)).to_owned())
        }
    };
    match shape {
        Shape::Word => word(c),
        Shape::Name => {
            if c.pick(2) == 0 {
                word(c)
            } else {
                ArgKind::Str((*c.one(STRINGS)).to_owned())
            }
        }
        Shape::Path => ArgKind::Path((*c.one(PATHS)).to_owned()),
        Shape::Number => ArgKind::Number((*c.one(NUMBERS)).to_owned()),
        Shape::Text => text(c),
        Shape::Value => match c.pick(4) {
            0 => word(c),
            1 => ArgKind::Number((*c.one(NUMBERS)).to_owned()),
            2 => ArgKind::Path((*c.one(PATHS)).to_owned()),
            _ => text(c),
        },
        Shape::Keyword(k) => ArgKind::Word(k.to_owned()),
        Shape::OneOf(list) => ArgKind::Word((*c.one(list)).to_owned()),
        Shape::Op(op) => ArgKind::Op(op),
    }
}

/// A valid block body for `spec`: a random selection of its fields, respecting repeats and
/// exclusive groups.
fn body(spec: &BlockSpec, c: &mut Choices<'_>) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut used: Vec<&str> = Vec::new();
    let n = c.pick(5);
    for _ in 0..n {
        let field = c.one(spec.fields);
        let repeated = used.contains(&field.name);
        let excluded = spec.exclusive.iter().any(|g| {
            g.contains(&field.name) && used.iter().any(|u| g.contains(u) && *u != field.name)
        });
        if (repeated && !field.repeatable) || excluded {
            continue;
        }
        used.push(field.name);
        let form = c.one(field.forms);
        let mut args = Vec::new();
        for slot in *form {
            if slot.optional && c.pick(2) == 0 {
                continue;
            }
            args.push(Arg {
                kind: value(slot.shape, c),
                span: sp(),
            });
        }
        let block = field.block.map(|inner| {
            Box::new(Block {
                statements: body(inner, c),
                trailing_comments: comments(c),
                close_comment: maybe_comment(c),
                span: sp(),
            })
        });
        out.push(Statement {
            comments: comments(c),
            keyword: Word {
                text: field.name.to_owned(),
                span: sp(),
            },
            args,
            trailing_comment: maybe_comment(c),
            block,
            span: sp(),
        });
    }
    out
}

fn document(list: &[u32]) -> Document {
    let mut c = Choices { list, at: 0 };
    Document {
        statements: body(&grammar::TOP, &mut c),
        trailing_comments: comments(&mut c),
    }
}

/// Fragments of text, valid and not, to glue into token soup.
const FRAGMENTS: &[&str] = &[
    "service",
    "web",
    "team/web",
    "{",
    "}",
    "\n",
    " ",
    "=",
    "==",
    "!=",
    "->",
    "8080",
    "500m",
    "/x/y",
    "\"s\"",
    "\"un",
    "\"\"\"a\nb\"\"\"",
    "\"\"\"",
    "#c\n",
    ";",
    ",",
    "image",
    "readiness",
    "http",
    "expose",
    "external",
    "@",
    "\\",
    "\r\n",
    "\t",
    "volume",
    "network",
    "allow",
    "-",
    "{{{{",
    "}}}}",
    "é",
    "\u{0}",
];

fn check_bounded(text: &str) -> (Document, Diagnostics) {
    let file = SourceFile::new("p.cca", text);
    let (doc, diags) = lang::parse_with_diagnostics(&file);
    assert!(diags.len() <= diags.cap());
    let _ = diags.to_string();
    (doc, diags)
}

/// `parse(format(parse(x))) == parse(x)` (syntax only, spans ignored) and formatting is
/// idempotent; skipped when the cap cut parsing short, since the cut point moves.
fn check_round_trip(text: &str) {
    let (first, diags) = lang::parse_syntax(&SourceFile::new("p.cca", text));
    if diags.is_truncated() {
        return;
    }
    let formatted = lang::format(&first);
    let (second, _) = lang::parse_syntax(&SourceFile::new("p.cca", formatted.as_str()));
    assert!(
        first.same_tree(&second),
        "round trip changed the tree\n--- input\n{text:?}\n--- formatted\n{formatted}"
    );
    assert_eq!(lang::format(&second), formatted, "format is not idempotent");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400)))]

    #[test]
    fn generated_documents_round_trip(list in prop::collection::vec(any::<u32>(), 0..300)) {
        let doc = document(&list);
        let text = lang::format(&doc);
        let parsed = match lang::parse(&SourceFile::new("gen.cca", text.as_str())) {
            Ok(parsed) => parsed,
            Err(diags) => panic!("generated document rejected:\n{text}\n{diags}"),
        };
        prop_assert!(parsed.same_tree(&doc), "tree changed:\n{}", text);
        prop_assert_eq!(lang::format(&parsed), text);
    }

    #[test]
    fn token_soup_never_panics_and_round_trips(
        parts in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..120),
        sep in prop::sample::select(&["", " ", "\n"][..]),
    ) {
        let text = parts.join(sep);
        check_bounded(&text);
        check_round_trip(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let text = String::from_utf8_lossy(&bytes);
        check_bounded(&text);
        check_round_trip(&text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[ -~\n\té{}\"]{0,400}") {
        check_bounded(&text);
        check_round_trip(&text);
    }
}

#[test]
fn many_errors_stay_capped() {
    let text = ";".repeat(100_000);
    let (_, diags) = check_bounded(&text);
    assert_eq!(diags.len(), diags.cap());
    assert!(diags.is_truncated());
}
