//! `cca rollout status|pause|resume|undo SERVICE`: a service's rollout through the API.

use std::process::ExitCode;

use axum::body::Bytes;
use hyper::Method;
use serde_json::{Value as Json, json};

use super::CliError;
use super::client::{ApiClient, ClientArgs, encode, value_text};
use super::remote::block_on;

/// Arguments of `cca rollout`.
#[derive(Debug, clap::Args)]
pub struct RolloutArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: RolloutCommand,
}

/// `cca rollout` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum RolloutCommand {
    /// Where the rollout stands: phase and why, the version in force, the desired and the
    /// stable one, and how many instances run the version in force and are ready.
    Status {
        /// The service.
        service: String,
        /// Print the server's JSON answer (for scripts).
        #[arg(long)]
        json: bool,
        /// The server.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Hold the rollout where it is: no instance is replaced for its version, and a newly
    /// applied version waits (needs an admin token).
    Pause {
        /// The service.
        service: String,
        /// The server.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Go on with the desired version: unpause, or try again a version that was rolled back
    /// or undone (needs an admin token).
    Resume {
        /// The service.
        service: String,
        /// The server.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Put an earlier kept version in force (needs an admin token).
    Undo {
        /// The service.
        service: String,
        /// The version to return to (16 digits, or a unique prefix of 4 or more, as `cca
        /// rollout status` lists them); the version before the one in force when absent.
        #[arg(long)]
        to_version: Option<String>,
        /// The server.
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// Runs `cca rollout`.
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached or refuses (an unknown service, an
/// undo to a version that is not kept, a request while the previous one waits).
pub fn run(args: &RolloutArgs) -> Result<ExitCode, CliError> {
    let (service, client, body) = match &args.command {
        RolloutCommand::Status {
            service,
            json,
            client,
        } => return status(service, *json, client),
        RolloutCommand::Pause { service, client } => (service, client, json!({"action": "pause"})),
        RolloutCommand::Resume { service, client } => {
            (service, client, json!({"action": "resume"}))
        }
        RolloutCommand::Undo {
            service,
            to_version,
            client,
        } => (
            service,
            client,
            json!({"action": "undo", "to_version": to_version}),
        ),
    };
    let client = ApiClient::new(client);
    let path = format!("/api/rollout/{}", encode(service));
    block_on(async move {
        let answer = client
            .ok(Method::POST, &path, Bytes::from(body.to_string()))
            .await?;
        println!(
            "asked the rollout of {service} to {} (request {}); `cca rollout status {service}` \
             shows when it is done",
            value_text(&answer["action"]),
            answer["request"]
        );
        Ok(ExitCode::SUCCESS)
    })
}

fn status(service: &str, json: bool, client: &ClientArgs) -> Result<ExitCode, CliError> {
    let client = ApiClient::new(client);
    let path = format!("/api/rollout/{}", encode(service));
    block_on(async move {
        let answer = client.ok(Method::GET, &path, Bytes::new()).await?;
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&answer).unwrap_or_else(|_| answer.to_string())
            );
        } else {
            print!("{}", status_text(&answer));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The text `cca rollout status` prints for the API's answer.
pub fn status_text(answer: &Json) -> String {
    let text = |v: &Json| match v {
        Json::Null => "none".to_owned(),
        other => value_text(other),
    };
    let mut out = format!(
        "{}: {} ({})\n",
        text(&answer["service"]),
        text(&answer["phase"]),
        text(&answer["reason"])
    );
    out.push_str(&format!(
        "  in force  {}: {} of {} updated, {} ready, {} of other versions left\n",
        text(&answer["version"]),
        answer["updated"],
        answer["instances"],
        answer["ready"],
        answer["old"]
    ));
    out.push_str(&format!("  desired   {}\n", text(&answer["desired"])));
    out.push_str(&format!("  stable    {}\n", text(&answer["stable"])));
    if !answer["rolled_back_from"].is_null() {
        out.push_str(&format!(
            "  rolled back from {}\n",
            text(&answer["rolled_back_from"])
        ));
    }
    out.push_str(&format!(
        "  failures  {} this rollout",
        answer["failures"].as_u64().unwrap_or(0)
    ));
    if let Some(policy) = answer["policy"].as_object() {
        out.push_str(&format!(
            " (rolled back at {}; deadline {} without progress; min ready {})",
            policy
                .get("failure_threshold")
                .map_or_else(String::new, Json::to_string),
            policy
                .get("progress_deadline")
                .map_or_else(String::new, value_text),
            policy.get("min_ready").map_or_else(String::new, value_text),
        ));
    }
    out.push('\n');
    let kept: Vec<String> = answer["kept"]
        .as_array()
        .into_iter()
        .flatten()
        .map(value_text)
        .collect();
    out.push_str(&format!("  kept      {} (oldest first)\n", kept.join(", ")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_the_phase_the_versions_and_the_counts() {
        let answer = json!({
            "service": "web", "phase": "rolled back",
            "reason": "version bbbbbbbb failed 3 times (threshold 3); rolled back to version aaaaaaaa",
            "version": "aaaaaaaaaaaaaaaa", "desired": "bbbbbbbbbbbbbbbb",
            "stable": "aaaaaaaaaaaaaaaa", "rolled_back_from": "bbbbbbbbbbbbbbbb",
            "kept": ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"], "failures": 0,
            "instances": 3, "updated": 3, "ready": 2, "old": 1,
            "policy": {"progress_deadline": "10m", "min_ready": "0s", "failure_threshold": 3},
        });
        let text = status_text(&answer);
        assert!(
            text.starts_with("web: rolled back (version bbbbbbbb failed 3 times"),
            "{text}"
        );
        assert!(
            text.contains(
                "in force  aaaaaaaaaaaaaaaa: 3 of 3 updated, 2 ready, 1 of other versions left"
            ),
            "{text}"
        );
        assert!(text.contains("rolled back from bbbbbbbbbbbbbbbb"), "{text}");
        assert!(text.contains("deadline 10m without progress"), "{text}");
    }
}
