//! `cca completions SHELL`: shell completions, printed to stdout.
//!
//! ```text
//! cca completions bash > ~/.local/share/bash-completion/completions/cca
//! cca completions zsh > ~/.zfunc/_cca
//! cca completions fish > ~/.config/fish/completions/cca.fish
//! ```

use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// Arguments of `cca completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to generate completions for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Prints the completion script of `args.shell`.
pub fn run(args: &CompletionsArgs) -> ExitCode {
    let mut command = Cli::command();
    clap_complete::generate(args.shell, &mut command, "cca", &mut std::io::stdout());
    ExitCode::SUCCESS
}
