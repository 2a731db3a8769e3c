//! `cca fmt FILE`: the canonical layout of a `.cca` file.
//!
//! Only the syntax must be valid (unknown fields are formatted as they are, so a file written for
//! a newer version still formats). By default the formatted text goes to stdout; `--write`
//! rewrites the file when it differs; `--check` prints nothing to stdout and exits 1 when the
//! file is not formatted. A file with syntax errors gets its diagnostics and exit code 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ccattler_controllers::lang;

use super::{CliError, EXIT_FAILURE, read_source};

/// Arguments of `cca fmt`.
#[derive(Debug, clap::Args)]
pub struct FmtArgs {
    /// The .cca file to format.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print nothing; exit 1 (naming the file on stderr) when it is not in canonical format.
    #[arg(long, conflicts_with = "write")]
    pub check: bool,
    /// Rewrite the file in place (only when its format changes) instead of printing it.
    #[arg(long)]
    pub write: bool,
}

/// Formats the file; see the [module docs](self).
///
/// # Errors
///
/// [`CliError::Read`] or [`CliError::Write`] when the file cannot be read or rewritten.
pub fn run(args: &FmtArgs) -> Result<ExitCode, CliError> {
    let file = read_source(&args.file)?;
    let (doc, diagnostics) = lang::parse_syntax(&file);
    if diagnostics.has_errors() {
        eprint!("{diagnostics}");
        eprintln!(
            "{}: not formatted: fix the syntax errors first",
            file.name()
        );
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    let formatted = lang::format(&doc);
    let unchanged = formatted == file.text();
    if args.check {
        if unchanged {
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!(
            "{}: not in canonical format (`cca fmt --write {}` fixes it)",
            file.name(),
            file.name()
        );
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    if args.write {
        if !unchanged {
            write_atomically(&args.file, &formatted)?;
            eprintln!("{}: formatted", file.name());
        }
        return Ok(ExitCode::SUCCESS);
    }
    print!("{formatted}");
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` to a sibling temporary file, then renames it over `path`, so that a failure
/// never leaves a half-written file.
fn write_atomically(path: &Path, text: &str) -> Result<(), CliError> {
    let error = |source| CliError::Write {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(error)?;
    std::io::Write::write_all(&mut temp, text.as_bytes()).map_err(error)?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(temp.path(), meta.permissions());
    }
    temp.persist(path).map_err(|e| error(e.error))?;
    Ok(())
}
