//! `cca`, the reference cluster's command line.
//!
//! Run the example cluster with:
//!
//! ```text
//! cargo run -p ccattler-examples --bin cca -- dev examples/hello.cca
//! ```
//!
//! `cca --help` lists the commands; the code lives in `ccattler_examples::cca`.

fn main() -> std::process::ExitCode {
    ccattler_examples::cca::run()
}
