//! The grammar table: which fields each block accepts, with which arguments, and which take a
//! block of their own. [`check`](mod@super::check) holds a [`Document`](super::Document) against it;
//! the compiler can rely on every statement that passed having one of the listed shapes.
//!
//! The table is data, so messages ("accepted: `expose [external] PORT [http|tcp]`") and the
//! "did you mean" suggestions are derived from it rather than written by hand.

use std::fmt::Write as _;

use super::syntax::ArgKind;
use super::token::Op;

/// What one argument must look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// An identifier.
    Word,
    /// An identifier or a string (an image may be quoted).
    Name,
    /// A path starting with `/`.
    Path,
    /// A number, unit allowed.
    Number,
    /// A `"..."` or `"""..."""` string.
    Text,
    /// Any of word, number, path, string.
    Value,
    /// Exactly this word.
    Keyword(&'static str),
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// This operator.
    Op(Op),
}

impl Shape {
    /// Whether `arg` has this shape.
    #[must_use]
    pub fn fits(self, arg: &ArgKind) -> bool {
        match (self, arg) {
            (Shape::Word, ArgKind::Word(_)) => true,
            (Shape::Name, ArgKind::Word(_) | ArgKind::Str(_)) => true,
            (Shape::Path, ArgKind::Path(_)) => true,
            (Shape::Number, ArgKind::Number(_)) => true,
            (Shape::Text, ArgKind::Str(_) | ArgKind::Block3(_)) => true,
            (Shape::Value, a) => !matches!(a, ArgKind::Op(_)),
            (Shape::Keyword(k), ArgKind::Word(w)) => w == k,
            (Shape::OneOf(list), ArgKind::Word(w)) => list.contains(&w.as_str()),
            (Shape::Op(op), ArgKind::Op(o)) => op == *o,
            _ => false,
        }
    }

    /// How the shape is named in messages: "a number", "one of `always`, `never`".
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            Shape::Word => "a name".to_owned(),
            Shape::Name => "a name or a string".to_owned(),
            Shape::Path => "a path starting with `/`".to_owned(),
            Shape::Number => "a number".to_owned(),
            Shape::Text => "a string".to_owned(),
            Shape::Value => "a value".to_owned(),
            Shape::Keyword(k) => format!("`{k}`"),
            Shape::OneOf(list) => {
                let words: Vec<String> = list.iter().map(|w| format!("`{w}`")).collect();
                format!("one of {}", words.join(", "))
            }
            Shape::Op(op) => format!("`{op}`"),
        }
    }
}

/// One argument position of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// What the argument must look like.
    pub shape: Shape,
    /// Whether it may be left out.
    pub optional: bool,
    /// The placeholder shown in usage lines: `PORT`, `NAME`, `/PATH`.
    pub placeholder: &'static str,
}

const fn req(shape: Shape, placeholder: &'static str) -> Slot {
    Slot {
        shape,
        optional: false,
        placeholder,
    }
}

const fn opt(shape: Shape, placeholder: &'static str) -> Slot {
    Slot {
        shape,
        optional: true,
        placeholder,
    }
}

/// A field (or nested declaration) a block accepts.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// The keyword.
    pub name: &'static str,
    /// The accepted argument lists; a statement must match one of them.
    pub forms: &'static [&'static [Slot]],
    /// Whether it may appear more than once in the same block.
    pub repeatable: bool,
    /// The block it requires, or `None` when it takes no block.
    pub block: Option<&'static BlockSpec>,
}

impl Field {
    /// The usage line: `expose [external] PORT [http|tcp]`, `resources { ... }`; forms joined by
    /// " or ".
    #[must_use]
    pub fn usage(&self) -> String {
        let mut lines = Vec::new();
        for form in self.forms {
            let mut s = self.name.to_owned();
            for slot in *form {
                let shown = match slot.shape {
                    Shape::Keyword(k) => k.to_owned(),
                    Shape::OneOf(list) => list.join("|"),
                    Shape::Op(op) => op.as_str().to_owned(),
                    _ => slot.placeholder.to_owned(),
                };
                if slot.optional {
                    let _ = write!(s, " [{shown}]");
                } else {
                    let _ = write!(s, " {shown}");
                }
            }
            if self.block.is_some() {
                s.push_str(" { ... }");
            }
            lines.push(format!("`{s}`"));
        }
        lines.join(" or ")
    }
}

/// What a block accepts.
#[derive(Debug)]
pub struct BlockSpec {
    /// How the block is called when its keyword is not at hand ("probe", "the top level").
    pub name: &'static str,
    /// The accepted fields.
    pub fields: &'static [Field],
    /// Groups of fields of which at most one may appear (a probe checks one way).
    pub exclusive: &'static [&'static [&'static str]],
}

impl BlockSpec {
    /// The field called `name`.
    #[must_use]
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The field names, comma-separated, for messages.
    #[must_use]
    pub fn field_list(&self) -> String {
        let names: Vec<&str> = self.fields.iter().map(|f| f.name).collect();
        names.join(", ")
    }
}

const fn field(
    name: &'static str,
    forms: &'static [&'static [Slot]],
    repeatable: bool,
    block: Option<&'static BlockSpec>,
) -> Field {
    Field {
        name,
        forms,
        repeatable,
        block,
    }
}

const NO_ARGS: &[&[Slot]] = &[&[]];
const ONE_NUMBER: &[&[Slot]] = &[&[req(Shape::Number, "N")]];
const DURATION: &[&[Slot]] = &[&[req(Shape::Number, "D")]];
const LABEL_EQ: &[&[Slot]] = &[&[
    req(Shape::Word, "LABEL"),
    req(Shape::Op(Op::Assign), "="),
    req(Shape::Value, "VALUE"),
]];
const RULE: &[&[Slot]] = &[
    &[
        req(Shape::Word, "SVC"),
        req(Shape::Op(Op::Arrow), "->"),
        req(Shape::Word, "SVC"),
    ],
    &[
        req(Shape::Word, "SVC"),
        req(Shape::Op(Op::Arrow), "->"),
        req(Shape::Word, "SVC"),
        req(Shape::Keyword("port"), "port"),
        req(Shape::Number, "N"),
    ],
];

/// The top level of a file: `service`, `volume` and `network` declarations.
pub static TOP: BlockSpec = BlockSpec {
    name: "the top level",
    fields: &[
        field(
            "service",
            &[&[req(Shape::Word, "NAME")]],
            true,
            Some(&SERVICE),
        ),
        field(
            "volume",
            &[&[req(Shape::Word, "NAME")]],
            true,
            Some(&VOLUME),
        ),
        field("network", NO_ARGS, true, Some(&NETWORK)),
    ],
    exclusive: &[],
};

/// The body of `service NAME { ... }`.
pub static SERVICE: BlockSpec = BlockSpec {
    name: "service",
    fields: &[
        field("image", &[&[req(Shape::Name, "IMAGE")]], false, None),
        field(
            "command",
            &[&[req(Shape::Text, "\"ARGV...\"")]],
            false,
            None,
        ),
        field("instances", ONE_NUMBER, false, None),
        field(
            "restart",
            &[&[req(
                Shape::OneOf(&["always", "on_failure", "never"]),
                "POLICY",
            )]],
            false,
            None,
        ),
        field(
            "expose",
            &[&[
                opt(Shape::Keyword("external"), "external"),
                req(Shape::Number, "PORT"),
                opt(Shape::OneOf(&["http", "tcp"]), "PROTOCOL"),
                opt(Shape::Keyword("static"), "static"),
            ]],
            true,
            None,
        ),
        field("resources", NO_ARGS, false, Some(&RESOURCES)),
        field("health", NO_ARGS, false, Some(&PROBE)),
        field("startup", NO_ARGS, false, Some(&PROBE)),
        field("liveness", NO_ARGS, false, Some(&PROBE)),
        field("readiness", NO_ARGS, false, Some(&PROBE)),
        field("placement", NO_ARGS, false, Some(&PLACEMENT)),
        field("update", NO_ARGS, false, Some(&UPDATE)),
        field("scale", NO_ARGS, false, Some(&SCALE)),
        field("config", NO_ARGS, false, Some(&CONFIG)),
        field(
            "secret",
            &[&[req(Shape::Word, "NAME"), opt(Shape::Path, "/mount/path")]],
            true,
            None,
        ),
        field("init", NO_ARGS, true, Some(&INIT)),
        field(
            "volume",
            &[&[req(Shape::Word, "VOLNAME"), req(Shape::Path, "/mount/path")]],
            true,
            None,
        ),
        field("stateful", NO_ARGS, false, None),
    ],
    exclusive: &[],
};

/// `resources { ... }`.
pub static RESOURCES: BlockSpec = BlockSpec {
    name: "resources",
    fields: &[
        field("cpu", ONE_NUMBER, false, None),
        field("memory", ONE_NUMBER, false, None),
    ],
    exclusive: &[],
};

/// `health`, `startup`, `liveness` and `readiness` blocks.
pub static PROBE: BlockSpec = BlockSpec {
    name: "probe",
    fields: &[
        field("http", &[&[req(Shape::Path, "/PATH")]], false, None),
        field("tcp", NO_ARGS, false, None),
        field("exec", &[&[req(Shape::Text, "\"CMD\"")]], false, None),
        field("port", ONE_NUMBER, false, None),
        field("every", DURATION, false, None),
        field("timeout", DURATION, false, None),
        field("failure_threshold", ONE_NUMBER, false, None),
        field("success_threshold", ONE_NUMBER, false, None),
        field("initial_delay", DURATION, false, None),
    ],
    exclusive: &[&["http", "tcp", "exec"]],
};

/// `placement { ... }`.
pub static PLACEMENT: BlockSpec = BlockSpec {
    name: "placement",
    fields: &[
        field("architecture", &[&[req(Shape::Word, "ARCH")]], false, None),
        field("zone", &[&[req(Shape::Word, "spread|ZONE")]], false, None),
        field("require", LABEL_EQ, true, None),
        field("prefer", LABEL_EQ, true, None),
        field("accept", &[&[req(Shape::Word, "TAINT")]], true, None),
    ],
    exclusive: &[],
};

/// `update { ... }`.
pub static UPDATE: BlockSpec = BlockSpec {
    name: "update",
    fields: &[
        field("max_unavailable", ONE_NUMBER, false, None),
        field("max_extra", ONE_NUMBER, false, None),
        field("progress_deadline", DURATION, false, None),
        field("min_ready", DURATION, false, None),
        field("failure_threshold", ONE_NUMBER, false, None),
    ],
    exclusive: &[],
};

/// `scale { ... }`.
pub static SCALE: BlockSpec = BlockSpec {
    name: "scale",
    fields: &[field("horizontal", NO_ARGS, false, Some(&HORIZONTAL))],
    exclusive: &[],
};

/// `horizontal { ... }` inside `scale`.
pub static HORIZONTAL: BlockSpec = BlockSpec {
    name: "horizontal",
    fields: &[
        field("min", ONE_NUMBER, false, None),
        field("max", ONE_NUMBER, false, None),
        field(
            "target",
            &[&[
                req(Shape::Word, "METRIC"),
                req(Shape::Op(Op::Assign), "="),
                req(Shape::Number, "N[%]"),
            ]],
            true,
            None,
        ),
        field("stabilization", NO_ARGS, false, Some(&STABILIZATION)),
    ],
    exclusive: &[],
};

/// `stabilization { ... }` inside `horizontal`.
pub static STABILIZATION: BlockSpec = BlockSpec {
    name: "stabilization",
    fields: &[
        field("scale_up", DURATION, false, None),
        field("scale_down", DURATION, false, None),
    ],
    exclusive: &[],
};

/// `config { ... }`.
pub static CONFIG: BlockSpec = BlockSpec {
    name: "config",
    fields: &[
        field(
            "env",
            &[
                &[req(Shape::Word, "KEY"), req(Shape::Value, "VALUE")],
                &[
                    req(Shape::Word, "KEY"),
                    req(Shape::Op(Op::Assign), "="),
                    req(Shape::Value, "VALUE"),
                ],
            ],
            true,
            None,
        ),
        field(
            "file",
            &[&[req(Shape::Path, "/PATH"), req(Shape::Value, "CONTENT")]],
            true,
            None,
        ),
    ],
    exclusive: &[],
};

/// `init { ... }`.
pub static INIT: BlockSpec = BlockSpec {
    name: "init",
    fields: &[
        field("exec", &[&[req(Shape::Text, "\"CMD\"")]], false, None),
        field("timeout", DURATION, false, None),
        field("retry", ONE_NUMBER, false, None),
    ],
    exclusive: &[],
};

/// The body of a top-level `volume NAME { ... }`.
pub static VOLUME: BlockSpec = BlockSpec {
    name: "volume",
    fields: &[
        field("size", ONE_NUMBER, false, None),
        field(
            "persistent",
            &[&[req(Shape::OneOf(&["true", "false"]), "BOOL")]],
            false,
            None,
        ),
    ],
    exclusive: &[],
};

/// `network { allow|deny FROM -> TO [port N] }`: the rules
/// [`NetworkController`](crate::standard::NetworkController) enforces, first match wins.
pub static NETWORK: BlockSpec = BlockSpec {
    name: "network",
    fields: &[
        field("allow", RULE, true, None),
        field("deny", RULE, true, None),
    ],
    exclusive: &[],
};

/// Every block spec with the keyword that opens it, top level first (for "did you mean" across
/// blocks).
pub static ALL: &[(&str, &BlockSpec)] = &[
    ("", &TOP),
    ("service", &SERVICE),
    ("resources", &RESOURCES),
    ("readiness", &PROBE),
    ("placement", &PLACEMENT),
    ("update", &UPDATE),
    ("scale", &SCALE),
    ("horizontal", &HORIZONTAL),
    ("stabilization", &STABILIZATION),
    ("config", &CONFIG),
    ("init", &INIT),
    ("volume", &VOLUME),
    ("network", &NETWORK),
];
