//! Shape checks: holds a [`Document`] against the table in [`super::grammar`].
//!
//! These checks know which keywords exist and what their arguments look like, not what the values
//! mean: units, port ranges, counts, `max < min`, duplicate names and references are the
//! compiler's, which adds its diagnostics to the same list.
//!
//! | code | when |
//! |---|---|
//! | `cca::unknown-field` | a keyword the block does not accept (with "did you mean") |
//! | `cca::missing-argument` | too few arguments |
//! | `cca::wrong-argument` | an argument of the wrong kind, or a word not in the accepted set |
//! | `cca::extra-argument` | too many arguments |
//! | `cca::missing-block` | a field that needs `{ ... }` has none |
//! | `cca::unexpected-block` | a field that takes no block has one |
//! | `cca::repeated-field` | a field that may appear once appears again |
//! | `cca::conflicting-fields` | two fields of which only one may be given (`http` and `tcp`) |

use std::fmt;

use super::diagnostic::{Diagnostic, Diagnostics};
use super::grammar::{self, BlockSpec, Field, Shape, Slot};
use super::span::Span;
use super::syntax::{Arg, Document, Statement};

/// Checks every statement of `doc` against the grammar, pushing problems to `diags`.
pub fn check_document(doc: &Document, diags: &mut Diagnostics) {
    let mut seen = Vec::new();
    for st in &doc.statements {
        check_top_statement(st, &mut seen, diags);
    }
}

/// Checks one top-level statement; `seen` carries what earlier top-level statements declared.
pub(crate) fn check_top_statement(
    st: &Statement,
    seen: &mut Vec<(&'static str, Span)>,
    diags: &mut Diagnostics,
) {
    check_statement(&grammar::TOP, &"the top level", st, seen, diags);
}

/// How a block is named in messages, built only when a message needs it: `` `service web` ``.
struct Context<'a> {
    keyword: &'a str,
    name: Option<&'a str>,
}

impl fmt::Display for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            Some(name) => write!(f, "`{} {name}`", self.keyword),
            None => write!(f, "`{}`", self.keyword),
        }
    }
}

/// Checks `st`, a statement inside a block described by `spec` and called `context` in messages.
fn check_statement(
    spec: &BlockSpec,
    context: &dyn fmt::Display,
    st: &Statement,
    seen: &mut Vec<(&'static str, Span)>,
    diags: &mut Diagnostics,
) {
    if diags.is_full() {
        diags.mark_truncated();
        return;
    }
    let Some(field) = spec.field(st.name()) else {
        diags.push(unknown_field(spec, context, st));
        return;
    };
    // Only fields that may appear once, or belong to an exclusive group, are remembered: a
    // top level of 10,000 services keeps this list empty rather than quadratic.
    let exclusive = spec.exclusive.iter().any(|g| g.contains(&field.name));
    if field.repeatable && !exclusive {
        // Nothing to remember.
    } else if let Some((_, first)) = seen.iter().find(|(n, _)| *n == field.name) {
        if !field.repeatable {
            diags.push(
                Diagnostic::error(
                    "cca::repeated-field",
                    st.keyword.span,
                    format!("`{}` is given twice in {context}", field.name),
                )
                .with_label("given again here")
                .with_secondary(*first, "first given here")
                .with_help(format!("keep only one `{}` line", field.name)),
            );
        }
    } else {
        for group in spec.exclusive {
            if !group.contains(&field.name) {
                continue;
            }
            if let Some((other, first)) = seen.iter().find(|(n, _)| group.contains(n)) {
                diags.push(
                    Diagnostic::error(
                        "cca::conflicting-fields",
                        st.keyword.span,
                        format!("`{}` conflicts with `{other}` in {context}", field.name),
                    )
                    .with_label("second one here")
                    .with_secondary(*first, "first one here")
                    .with_help(format!("give only one of: {}", group.join(", "))),
                );
            }
        }
    }
    if !field.repeatable || exclusive {
        seen.push((field.name, st.keyword.span));
    }
    check_args(field, st, diags);
    match (field.block, &st.block) {
        (Some(inner), Some(block)) => {
            let context = Context {
                keyword: field.name,
                name: st.args.first().and_then(|a| a.kind.text()),
            };
            let mut inner_seen = Vec::new();
            for child in &block.statements {
                check_statement(inner, &context, child, &mut inner_seen, diags);
            }
        }
        (Some(inner), None) => {
            diags.push(
                Diagnostic::error(
                    "cca::missing-block",
                    st.span,
                    format!("`{}` needs a block", field.name),
                )
                .with_label("expected `{` after this")
                .with_help(format!(
                    "write {} with one field per line inside; accepted fields: {}",
                    field.usage(),
                    inner.field_list()
                )),
            );
        }
        (None, Some(block)) => {
            diags.push(
                Diagnostic::error(
                    "cca::unexpected-block",
                    Span::new(block.span.start, block.span.start + 1),
                    format!("`{}` takes no block", field.name),
                )
                .with_label("not expected here")
                .with_help(format!("accepted: {}", field.usage())),
            );
        }
        (None, None) => {}
    }
}

fn unknown_field(spec: &BlockSpec, context: &dyn fmt::Display, st: &Statement) -> Diagnostic {
    let name = st.name();
    let mut help = String::new();
    if let Some(best) = closest(name, spec.fields.iter().map(|f| f.name)) {
        help = format!("did you mean `{best}`? ");
    } else if !std::ptr::eq(spec, &grammar::TOP) && grammar::TOP.field(name).is_some() {
        help = format!("`{name}` is a top-level declaration: is a `}}` missing above it? ");
    } else if let Some((parent, _)) = grammar::ALL
        .iter()
        .find(|(parent, s)| !parent.is_empty() && s.field(name).is_some())
    {
        help = format!("`{name}` goes inside `{parent} {{ ... }}`. ");
    }
    help.push_str(&format!("{context} accepts: {}", spec.field_list()));
    Diagnostic::error(
        "cca::unknown-field",
        st.keyword.span,
        format!("unknown field `{name}` in {context}"),
    )
    .with_label("not accepted here")
    .with_help(help)
}

/// The candidate closest to `word`, if close enough to be a likely typo.
fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= 2 && *d < c.len().max(2) && *d < word.len().max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// How an argument list failed to match a form.
#[derive(Clone, Copy)]
enum Miss {
    /// Ran out of arguments; this slot was next.
    TooFew(Slot),
    /// The argument at this index does not fit this slot.
    Wrong(usize, Slot),
    /// Arguments left over from this index.
    TooMany(usize),
}

impl Miss {
    /// How far the match got: the most advanced miss is the most useful to report.
    fn progress(self, n_args: usize) -> usize {
        match self {
            Miss::TooFew(_) => n_args,
            Miss::Wrong(i, _) | Miss::TooMany(i) => i,
        }
    }
}

fn match_form(slots: &[Slot], args: &[Arg], at: usize) -> Result<(), Miss> {
    let Some((slot, rest)) = slots.split_first() else {
        return if at == args.len() {
            Ok(())
        } else {
            Err(Miss::TooMany(at))
        };
    };
    let taken = match args.get(at) {
        Some(arg) if slot.shape.fits(&arg.kind) => match_form(rest, args, at + 1),
        Some(_) => Err(Miss::Wrong(at, *slot)),
        None => Err(Miss::TooFew(*slot)),
    };
    match taken {
        Ok(()) => Ok(()),
        Err(miss) if slot.optional => match match_form(rest, args, at) {
            Ok(()) => Ok(()),
            Err(other) if other.progress(args.len()) > miss.progress(args.len()) => Err(other),
            Err(_) => Err(miss),
        },
        Err(miss) => Err(miss),
    }
}

fn check_args(field: &Field, st: &Statement, diags: &mut Diagnostics) {
    let mut best: Option<Miss> = None;
    for form in field.forms {
        match match_form(form, &st.args, 0) {
            Ok(()) => return,
            Err(miss) => {
                let better =
                    best.is_none_or(|b| miss.progress(st.args.len()) > b.progress(st.args.len()));
                if better {
                    best = Some(miss);
                }
            }
        }
    }
    let Some(miss) = best else { return };
    let usage = format!("accepted: {}", field.usage());
    let d = match miss {
        Miss::TooFew(slot) => {
            let last = st.args.last().map_or(st.keyword.span, |a| a.span);
            Diagnostic::error(
                "cca::missing-argument",
                last,
                format!("`{}` is missing {}", field.name, slot.shape.describe()),
            )
            .with_label(format!("expected {} after this", slot.shape.describe()))
            .with_help(usage)
        }
        Miss::Wrong(i, slot) => {
            let arg = &st.args[i];
            let mut help = String::new();
            if let (Shape::OneOf(list), Some(word)) = (slot.shape, arg.kind.text())
                && let Some(best) = closest(word, list.iter().copied())
            {
                help = format!("did you mean `{best}`? ");
            }
            help.push_str(&usage);
            Diagnostic::error(
                "cca::wrong-argument",
                arg.span,
                format!(
                    "`{}` expects {} here, found {}",
                    field.name,
                    slot.shape.describe(),
                    arg.kind.describe()
                ),
            )
            .with_label(format!("expected {}", slot.shape.describe()))
            .with_help(help)
        }
        Miss::TooMany(i) => {
            let span = st.args[i].span.to(st.args[st.args.len() - 1].span);
            Diagnostic::error(
                "cca::extra-argument",
                span,
                format!("too many arguments for `{}`", field.name),
            )
            .with_label("not expected")
            .with_help(format!("{usage}; each statement ends at a newline"))
        }
    };
    diags.push(d);
}
