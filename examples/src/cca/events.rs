//! `cca events [OBJECT] [--follow]`: what the controllers and the agents did, and why.
//!
//! Lists the recorded events (`GET /api/events`), oldest first, one per line: the time, the
//! object, the reason, the message and who wrote it. With `OBJECT`, only those about that
//! instance, or about that service and its instances. `--follow` then prints new ones as they
//! are written (`/changes?prefix=event/` from the listing's revision), until interrupted.

use std::process::ExitCode;

use axum::body::Bytes;
use ccattler_core::Event;
use hyper::Method;
use serde_json::Value as Json;

use super::api::events::concerns;
use super::client::{ApiClient, ClientArgs, encode, value_text};
use super::remote::{block_on, follow_changes};
use super::{CliError, EXIT_FAILURE};

/// Arguments of `cca events`.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// An instance id or a service name; every event when omitted.
    #[arg(value_name = "SVC|INSTANCE")]
    pub object: Option<String>,
    /// Keep printing new events as they are written.
    #[arg(long, short)]
    pub follow: bool,
    /// How many of the newest events to list first.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Print each event's JSON, one per line.
    #[arg(long)]
    pub json: bool,
    /// The server.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `cca events`.
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached, refuses, or the stream breaks.
pub fn run(args: &EventsArgs) -> Result<ExitCode, CliError> {
    let client = ApiClient::new(&args.client);
    block_on(async move {
        let mut path = format!("/api/events?limit={}", args.limit);
        if let Some(object) = &args.object {
            path.push_str(&format!("&object={}", encode(object)));
        }
        let answer = client.ok(Method::GET, &path, Bytes::new()).await?;
        for event in answer["events"].as_array().into_iter().flatten() {
            print_event(event, args.json);
        }
        if !args.follow {
            return Ok(ExitCode::SUCCESS);
        }
        let after = answer["revision"].as_u64().unwrap_or(0);
        follow(&client, args, after).await
    })
}

/// Prints the events written after revision `after`, as they come.
async fn follow(client: &ApiClient, args: &EventsArgs, after: u64) -> Result<ExitCode, CliError> {
    let path = format!("/changes?prefix=event/&after={after}");
    let mut stream = follow_changes(client, &path).await?;
    while let Some(sse) = stream
        .next()
        .await
        .map_err(|err| CliError::Api(format!("the event stream broke: {err}")))?
    {
        let data: Json = serde_json::from_str(&sse.data).unwrap_or(Json::Null);
        match sse.event.as_str() {
            "error" => {
                eprintln!("error: {}", value_text(&data["error"]));
                return Ok(ExitCode::from(EXIT_FAILURE));
            }
            "put" => {
                let Ok(event) = serde_json::from_value::<Event>(data["value"].clone()) else {
                    continue;
                };
                if args.object.as_deref().is_none_or(|o| concerns(&event, o)) {
                    let mut shown = data["value"].clone();
                    if let Some(object) = shown.as_object_mut() {
                        object.insert("revision".into(), Json::from(sse.id.parse::<u64>().ok()));
                    }
                    print_event(&shown, args.json);
                }
            }
            _ => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One event as a line: `TIME OBJECT REASON MESSAGE (SOURCE)`.
fn print_event(event: &Json, json: bool) {
    if json {
        println!("{event}");
        return;
    }
    println!("{}", line(event));
}

/// The line of one event.
fn line(event: &Json) -> String {
    let at = event["at_ms"].as_u64().map_or_else(String::new, time_text);
    format!(
        "{at:<24} {:<28} {:<10} {} ({})",
        value_text(&event["object"]),
        value_text(&event["reason"]),
        value_text(&event["message"]),
        value_text(&event["source"]),
    )
}

/// A Unix time in milliseconds as UTC text, `2026-12-01T12:00:00.123Z`.
fn time_text(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc() {
        assert_eq!(time_text(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time_text(1_796_131_849_645), "2026-12-01T13:30:49.645Z");
        assert_eq!(time_text(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
