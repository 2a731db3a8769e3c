//! Figures kept in the repository (`benches/figures/*.txt`), and their text form: one row a
//! line, `ROW name=value name=value ...`, `#` starting a comment. A figure program prints each
//! figure it measures beside the one kept, and rewrites the file when asked (`--keep`), so
//! that a change that makes things slower shows on the day it is made.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One row's figures by name.
pub type Figures = BTreeMap<String, f64>;

/// The rows of a kept file, by row name.
pub type Rows = BTreeMap<String, Figures>;

/// Reads the rows of the kept file at `path` (none when it does not exist yet).
pub fn read(path: &Path) -> Rows {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(row, rest)| (row.to_owned(), parse(rest)))
        .collect()
}

/// Writes `rows` to `path` under a one-line `header` comment.
///
/// # Errors
///
/// The file system's, when the file cannot be written.
pub fn write(path: &Path, header: &str, rows: &Rows) -> std::io::Result<()> {
    let mut text = format!("# {header}\n");
    for (row, figures) in rows {
        let _ = writeln!(text, "{row} {}", render(figures));
    }
    std::fs::write(path, text)
}

/// `name=value` pairs, space-separated, in name order.
pub fn render(figures: &Figures) -> String {
    figures
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The figures of a line of `name=value` pairs; words that are not such a pair are skipped.
pub fn parse(line: &str) -> Figures {
    line.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

/// The median of each figure over several runs of one row (the lower middle one for an even
/// count); a figure missing from some runs is the median of the runs that have it.
pub fn median(runs: &[Figures]) -> Figures {
    let mut values: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (name, value) in runs.iter().flatten() {
        values.entry(name).or_default().push(*value);
    }
    values
        .into_iter()
        .map(|(name, mut vs)| {
            vs.sort_by(f64::total_cmp);
            (name.to_owned(), vs[(vs.len() - 1) / 2])
        })
        .collect()
}

/// A figure as people read it: whole above 100 or when whole, else two decimals (three below
/// 1); `-` for none (NaN).
pub fn short(value: f64) -> String {
    if value.is_nan() {
        "-".into()
    } else if value.abs() >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// `NOW (kept THEN)`, or `NOW` when nothing is kept.
pub fn beside(now: Option<f64>, kept: Option<f64>) -> String {
    let now = short(now.unwrap_or(f64::NAN));
    match kept {
        Some(then) => format!("{now} (kept {})", short(then)),
        None => now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kept.txt");
        let mut rows = Rows::new();
        let figures: Figures = [("apply_s".to_owned(), 1.25), ("writes".to_owned(), 2031.0)]
            .into_iter()
            .collect();
        rows.insert("dev:10000x256".into(), figures.clone());
        write(&path, "figures", &rows).unwrap();
        assert_eq!(read(&path), rows);
        assert_eq!(parse("a=1 junk b=x c=2.5").len(), 2);
        assert_eq!(beside(Some(1.234), Some(2.0)), "1.23 (kept 2)");
        assert_eq!(short(f64::NAN), "-");
        assert_eq!(short(0.0123), "0.012");
    }

    #[test]
    fn the_median_of_runs_is_taken_figure_by_figure() {
        let run = |s: f64, w: f64| -> Figures {
            [("apply_s".to_owned(), s), ("writes".to_owned(), w)]
                .into_iter()
                .collect()
        };
        let mut only_in_one = run(9.0, 1.0);
        only_in_one.insert("lapses".into(), 2.0);
        let median = median(&[run(3.0, 30.0), only_in_one, run(1.0, 20.0)]);
        assert_eq!(median["apply_s"], 3.0);
        assert_eq!(median["writes"], 20.0);
        assert_eq!(median["lapses"], 2.0);
        assert_eq!(
            super::median(&[run(1.0, 1.0), run(2.0, 2.0)])["apply_s"],
            1.0
        );
    }
}
