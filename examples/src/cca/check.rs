//! `cca check FILE...`: validates `.cca` files offline.
//!
//! Every file is parsed, shape-checked and compiled exactly as `apply` would; every diagnostic of
//! every file (errors and warnings) is printed to stderr with its line and a caret. A file
//! without errors gets a one-line summary on stdout. The exit code is 1 when any file has an
//! error or cannot be read, 0 otherwise.

use std::path::PathBuf;
use std::process::ExitCode;

use ccattler_controllers::lang::{self, Compiled, Diagnostics, Severity, SourceFile};

use super::{EXIT_FAILURE, read_source, report};

/// Arguments of `cca check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The .cca files to check; all are checked even when one has errors.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Checks every file; see the [module docs](self).
pub fn run(args: &CheckArgs) -> ExitCode {
    let mut failed = false;
    for path in &args.files {
        let file = match read_source(path) {
            Ok(file) => file,
            Err(err) => {
                report(&err);
                failed = true;
                continue;
            }
        };
        let (compiled, diagnostics) = check_file(&file);
        if !diagnostics.is_empty() {
            eprint!("{diagnostics}");
        }
        match compiled {
            Some(compiled) => println!("{}: ok, {}", file.name(), summary(&compiled, &diagnostics)),
            None => {
                failed = true;
                eprintln!("{}: {}", file.name(), counts(&diagnostics));
            }
        }
    }
    if failed {
        ExitCode::from(EXIT_FAILURE)
    } else {
        ExitCode::SUCCESS
    }
}

/// The records of `file` for a command that acts on it: every diagnostic is printed to stderr
/// (warnings too), and with any error `None`, after a line saying that nothing was `done`
/// ("started", "simulated").
pub fn compile_or_report(file: &SourceFile, done: &str) -> Option<Compiled> {
    let (compiled, diagnostics) = check_file(file);
    if !diagnostics.is_empty() {
        eprint!("{diagnostics}");
    }
    if compiled.is_none() {
        eprintln!("{}: has errors; nothing was {done}", file.name());
    }
    compiled
}

/// Parses, checks and compiles `file`: the records when there is no error, and every diagnostic
/// (warnings included, which [`lang::check()`] drops on success).
pub fn check_file(file: &SourceFile) -> (Option<Compiled>, Diagnostics) {
    let (doc, mut diagnostics) = lang::parse_with_diagnostics(file);
    let compiled = lang::compile(&doc, &mut diagnostics);
    if diagnostics.has_errors() {
        (None, diagnostics)
    } else {
        (Some(compiled), diagnostics)
    }
}

/// "2 services (5 instances), 1 volume[, 1 warning]".
fn summary(compiled: &Compiled, diagnostics: &Diagnostics) -> String {
    let instances: u64 = compiled
        .services
        .iter()
        .map(|s| u64::from(s.instances))
        .sum();
    let mut line = format!(
        "{}, {}, {}",
        plural(compiled.services.len() as u64, "service"),
        plural(instances, "instance"),
        plural(compiled.volumes.len() as u64, "volume"),
    );
    if !diagnostics.is_empty() {
        line.push_str(&format!(", {}", counts(diagnostics)));
    }
    line
}

/// "2 errors, 1 warning".
fn counts(diagnostics: &Diagnostics) -> String {
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count() as u64;
    let warnings = diagnostics.len() as u64 - errors;
    let mut parts = vec![plural(errors, "error")];
    if warnings > 0 {
        parts.push(plural(warnings, "warning"));
    }
    if diagnostics.is_truncated() {
        parts.push("more not shown".to_owned());
    }
    parts.join(", ")
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_a_valid_file_and_counts_errors() {
        let file = SourceFile::new(
            "ok.cca",
            "service web {\n    image nginx\n    instances 3\n}\n",
        );
        let (compiled, diagnostics) = check_file(&file);
        let compiled = compiled.expect("valid");
        assert_eq!(
            summary(&compiled, &diagnostics),
            "1 service, 3 instances, 0 volumes"
        );

        let bad = SourceFile::new(
            "bad.cca",
            "service web {\n    imgae nginx\n    instances -1\n}\n",
        );
        let (compiled, diagnostics) = check_file(&bad);
        assert!(compiled.is_none());
        assert_eq!(
            counts(&diagnostics),
            "3 errors",
            "missing image, unknown field, negative"
        );
    }
}
