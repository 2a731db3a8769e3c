//! The client commands: `cca apply`, `get`, `query`, `watch`, `status`, `nodes`, `token create`
//! (and `cca rollout`, in [`super::rollout`]).
//!
//! Each sends one request to `cca server` (see [`super::api`] for the routes) and prints the
//! answer for a person, or as JSON with `--json` where offered. An error answer is printed with
//! the server's message (and, for `apply`, every diagnostic) and exits 1.

use ccattler_core::schema;
use ccattler_store::http::sse::EventReader;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use axum::body::Bytes;
use hyper::Method;
use serde_json::{Value as Json, json};

use super::client::{ApiClient, ClientArgs, encode, value_text};
use super::{CliError, EXIT_FAILURE};

/// Arguments of `cca apply`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The .cca file to apply.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Show what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also remove services, volumes and policies the file no longer declares.
    #[arg(long)]
    pub prune: bool,
    /// The server.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `cca get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Key prefix (`desired/service/`); everything when omitted.
    #[arg(value_name = "PREFIX", default_value = "")]
    pub prefix: String,
    /// Print the server's JSON answer.
    #[arg(long)]
    pub json: bool,
    /// The server.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `cca query`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Key prefix (`observed/instance/`).
    #[arg(value_name = "PREFIX", default_value = "")]
    pub prefix: String,
    /// Predicates on value fields, all of which must hold: `state==running`,
    /// `resources.cpu>=500`, `zone!=a` (the right side is JSON when it parses, else a string).
    #[arg(long = "where", short = 'w', value_name = "FIELD OP VALUE", value_parser = parse_predicate)]
    pub predicates: Vec<Json>,
    /// Print the server's JSON answer.
    #[arg(long)]
    pub json: bool,
    /// The server.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `cca watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Key prefix; everything when omitted.
    #[arg(value_name = "PREFIX", default_value = "")]
    pub prefix: String,
    /// Resume after this revision instead of starting now.
    #[arg(long, value_name = "REVISION")]
    pub after: Option<u64>,
    /// Print each event's JSON, one per line.
    #[arg(long)]
    pub json: bool,
    /// The server.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `cca status` and `cca nodes`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print the server's JSON answer (for scripts).
    #[arg(long)]
    pub json: bool,
    /// The server.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `cca token`.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// `cca token` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a one-time enrollment token for a new node (needs an admin token).
    Create {
        /// How long the token can be used (`10m`, `1h`).
        #[arg(long, default_value = "10m")]
        ttl: String,
        /// The server.
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub(crate) fn block_on<F: Future<Output = Result<ExitCode, CliError>>>(
    future: F,
) -> Result<ExitCode, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| CliError::Start(format!("the async runtime: {err}")))?
        .block_on(future)
}

fn print_json(value: &Json) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// Runs `cca apply`.
///
/// # Errors
///
/// [`CliError`] when the file cannot be read or the server cannot be reached.
pub fn apply(args: &ApplyArgs) -> Result<ExitCode, CliError> {
    let text = std::fs::read(&args.file).map_err(|source| CliError::Read {
        path: args.file.clone(),
        source,
    })?;
    let client = ApiClient::new(&args.client);
    let path = format!(
        "/config?dry_run={}&prune={}&name={}",
        args.dry_run,
        args.prune,
        encode(&args.file.display().to_string())
    );
    block_on(async move {
        match client.json(Method::POST, &path, text).await? {
            Ok(answer) => {
                println!("{}", answer["plan"].as_str().unwrap_or_default());
                match answer["revision"].as_u64() {
                    Some(revision) => println!("applied at revision {revision}"),
                    None if args.dry_run => println!("dry run: nothing was written"),
                    None => println!("nothing to change"),
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(failure) => {
                match failure.body.get("rendered").and_then(Json::as_str) {
                    Some(rendered) => eprint!("{rendered}"),
                    None => eprintln!("error: {}", failure.message()),
                }
                eprintln!("{}: nothing was applied", args.file.display());
                Ok(ExitCode::from(EXIT_FAILURE))
            }
        }
    })
}

fn print_facts(answer: &Json, json: bool) {
    if json {
        print_json(answer);
        return;
    }
    for fact in answer["facts"].as_array().into_iter().flatten() {
        println!(
            "{} {}",
            fact["key"].as_str().unwrap_or_default(),
            value_text(&fact["value"])
        );
    }
}

/// Runs `cca get`.
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached or refuses.
pub fn get(args: &GetArgs) -> Result<ExitCode, CliError> {
    let client = ApiClient::new(&args.client);
    block_on(async move {
        let path = format!("/state?prefix={}", encode(&args.prefix));
        let answer = client.ok(Method::GET, &path, Bytes::new()).await?;
        print_facts(&answer, args.json);
        Ok(ExitCode::SUCCESS)
    })
}

/// Parses `field OP value` into a predicate of the query body.
fn parse_predicate(text: &str) -> Result<Json, String> {
    for op in ["==", "!=", "<=", ">=", "<", ">"] {
        if let Some((field, value)) = text.split_once(op) {
            let value = value.trim();
            let value = serde_json::from_str::<Json>(value)
                .unwrap_or_else(|_| Json::String(value.to_owned()));
            return Ok(json!({ "field": field.trim(), "op": op, "value": value }));
        }
    }
    Err(format!(
        "expected FIELD OP VALUE with OP one of ==, !=, <, <=, >, >=; got {text:?}"
    ))
}

/// Runs `cca query`.
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached or refuses.
pub fn query(args: &QueryArgs) -> Result<ExitCode, CliError> {
    let client = ApiClient::new(&args.client);
    let body = json!({ "prefix": args.prefix, "where": args.predicates }).to_string();
    block_on(async move {
        let answer = client.ok(Method::POST, "/state/query", body).await?;
        print_facts(&answer, args.json);
        Ok(ExitCode::SUCCESS)
    })
}

/// Runs `cca watch` until the server ends the stream or Ctrl-C.
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached or refuses.
pub fn watch(args: &WatchArgs) -> Result<ExitCode, CliError> {
    let client = ApiClient::new(&args.client);
    block_on(async move {
        let mut path = format!("/changes?prefix={}", encode(&args.prefix));
        if let Some(after) = args.after {
            path.push_str(&format!("&after={after}"));
        }
        let mut events = follow_changes(&client, &path).await?;
        while let Some(event) = events
            .next()
            .await
            .map_err(|err| CliError::Api(err.to_string()))?
        {
            let data: Json = serde_json::from_str(&event.data).unwrap_or(Json::Null);
            match event.event.as_str() {
                "error" => {
                    eprintln!("error: {}", value_text(&data["error"]));
                    return Ok(ExitCode::from(EXIT_FAILURE));
                }
                _ if args.json => println!("{}", event.data),
                "ready" => eprintln!("watching from revision {}", data["revision"]),
                kind => println!(
                    "{} {} {} {}",
                    event.id,
                    kind.to_uppercase(),
                    value_text(&data["key"]),
                    data.get("value").map(value_text).unwrap_or_default()
                ),
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Opens the server-sent events of `path` (a `/changes` route with its query).
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached or does not answer with the stream.
pub(crate) async fn follow_changes(
    client: &ApiClient,
    path: &str,
) -> Result<EventReader, CliError> {
    let response = client
        .send(
            Method::GET,
            path,
            Bytes::new(),
            &[("accept", "text/event-stream")],
        )
        .await?;
    if !response.status().is_success() {
        return Err(CliError::Api(format!(
            "{path}: the server answered {}",
            response.status()
        )));
    }
    Ok(EventReader::new(response.into_body()))
}

/// Runs `cca status`.
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached or refuses.
pub fn status(args: &StatusArgs) -> Result<ExitCode, CliError> {
    let client = ApiClient::new(&args.client);
    block_on(async move {
        let answer = client.ok(Method::GET, "/api/status", Bytes::new()).await?;
        if args.json {
            print_json(&answer);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{:<24} {:>7} {:>7} {:>7} {:>7}",
            "SERVICE", "DESIRED", "PRESENT", "RUNNING", "READY"
        );
        let services = answer["services"].as_array().cloned().unwrap_or_default();
        for s in &services {
            println!(
                "{:<24} {:>7} {:>7} {:>7} {:>7}",
                value_text(&s["name"]),
                s["desired"].as_u64().unwrap_or(0),
                s["present"].as_u64().unwrap_or(0),
                s["running"].as_u64().unwrap_or(0),
                s["ready"].as_u64().unwrap_or(0)
            );
        }
        for s in &services {
            for reason in s["reasons"].as_array().into_iter().flatten() {
                println!(
                    "{}: {} unplaced: {}",
                    value_text(&s["name"]),
                    s["unplaced"],
                    value_text(reason)
                );
            }
            if let Some(scaling) = s["autoscaler"].as_object() {
                println!(
                    "{}: autoscaler recommends {}: {}",
                    value_text(&s["name"]),
                    scaling.get("instances").and_then(Json::as_u64).unwrap_or(0),
                    scaling.get("reason").map(value_text).unwrap_or_default()
                );
            }
            // A rollout is news while it is not complete.
            if let Some(rollout) = s["rollout"].as_object()
                && rollout.get("phase").and_then(Json::as_str) != Some("complete")
            {
                println!(
                    "{}: rollout {}: {}",
                    value_text(&s["name"]),
                    rollout.get("phase").map(value_text).unwrap_or_default(),
                    rollout.get("reason").map(value_text).unwrap_or_default()
                );
            }
            for line in init_lines(&s["init"]) {
                println!("{}: {line}", value_text(&s["name"]));
            }
            for trouble in s["troubled"].as_array().into_iter().flatten() {
                println!(
                    "{}: {} on {} is {}: {}",
                    value_text(&s["name"]),
                    value_text(&trouble["instance"]),
                    value_text(&trouble["node"]),
                    value_text(&trouble["state"]),
                    value_text(&trouble["reason"])
                );
            }
        }
        for line in volume_lines(&answer["volumes"]) {
            println!("{line}");
        }
        println!(
            "{} node{} alive; {}",
            answer["nodes"],
            if answer["nodes"] == 1 { "" } else { "s" },
            if answer["converged"] == true {
                "converged"
            } else {
                "not converged"
            }
        );
        if let Some(line) = control_plane_line(&answer["control_plane"]) {
            println!("{line}");
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The control plane of a `/api/status` answer, for a person: how many replicas are up
/// (their ids) and which one leads; `None` when the server does not report it.
pub fn control_plane_line(plane: &Json) -> Option<String> {
    let replicas = plane["replicas"].as_array()?;
    let ids: Vec<String> = replicas.iter().map(|r| value_text(&r["id"])).collect();
    let up = format!(
        "control plane: {} replica{} up ({})",
        ids.len(),
        if ids.len() == 1 { "" } else { "s" },
        ids.join(", ")
    );
    let leader = match (plane["elected"].as_bool(), plane["leader"].as_str()) {
        (Some(true), Some(leader)) => format!("leader: {leader}"),
        (Some(true), None) => "leader: none (an election is under way)".to_owned(),
        _ => "no election (memory store): each server runs its own controllers".to_owned(),
    };
    Some(format!("{up}; {leader}"))
}

/// Runs `cca nodes`.
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached or refuses.
pub fn nodes(args: &StatusArgs) -> Result<ExitCode, CliError> {
    let client = ApiClient::new(&args.client);
    block_on(async move {
        let answer = client.ok(Method::GET, "/api/nodes", Bytes::new()).await?;
        if args.json {
            print_json(&answer);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{:<16} {:<6} {:>8} {:>10}  NETWORK RULES",
            "NODE", "ALIVE", "CPU", "MEMORY"
        );
        for node in answer["nodes"].as_array().into_iter().flatten() {
            println!(
                "{:<16} {:<6} {:>8} {:>10}  {}",
                value_text(&node["name"]),
                if node["alive"] == true { "yes" } else { "no" },
                value_text(&node["status"]["cpu"]),
                value_text(&node["status"]["memory"]),
                network_text(&node["network"])
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// What a node's firewall report says, in a few words: `-` when it reported nothing, `none`
/// when it holds no rules, `revision R (N ports)` for the rules in force, and why newer ones
/// are not.
fn network_text(report: &Json) -> String {
    if report.is_null() {
        return "-".to_owned();
    }
    let revision = report["revision"].as_u64().unwrap_or(0);
    let mut text = if revision == 0 {
        "none".to_owned()
    } else {
        let ports = report["guarded"].as_u64().unwrap_or(0);
        let plural = if ports == 1 { "" } else { "s" };
        format!("revision {revision} ({ports} guarded port{plural})")
    };
    if let Some(error) = report["error"].as_str() {
        text.push_str(&format!("; not applied: {error}"));
    }
    text
}

/// Runs `cca token`.
///
/// # Errors
///
/// [`CliError::Api`] when the server cannot be reached or refuses.
pub fn token(args: &TokenArgs) -> Result<ExitCode, CliError> {
    match &args.command {
        TokenCommand::Create { ttl, client } => {
            let client = ApiClient::new(client);
            let body = json!({ "ttl": ttl }).to_string();
            block_on(async move {
                let answer = client.ok(Method::POST, "/api/tokens", body).await?;
                println!("{}", value_text(&answer["token"]));
                eprintln!(
                    "one-time enrollment token; expires at unix time {}",
                    answer["expires_at"]
                );
                Ok(ExitCode::SUCCESS)
            })
        }
    }
}

/// What `cca status` says of the volumes (the `volumes` of `/api/status`): one line per
/// attachment (its node, its instance or none, the size reserved and the disk its data uses,
/// flagged when over the size: the agent sets no quota), then persistent data a node keeps
/// that no attachment names.
fn volume_lines(volumes: &Json) -> Vec<String> {
    let mut lines = Vec::new();
    for a in volumes["attached"].as_array().into_iter().flatten() {
        let size = value_text(&a["size"]);
        let mut line = format!(
            "volume {}: {size} on {}, {}",
            value_text(&a["volume"]),
            value_text(&a["node"]),
            match a["instance"].as_str() {
                Some(instance) => format!("attached to {instance}"),
                None => "no instance attached (its data waits there)".to_owned(),
            }
        );
        if let Some(used) = a["used"].as_u64() {
            line.push_str(&format!(", {} used", approx_bytes(used)));
            let reserved = size
                .parse::<schema::Memory>()
                .map_or(u64::MAX, |m| m.bytes());
            if used > reserved {
                line.push_str(" (over its size: nothing enforces it, see to it)");
            }
        }
        lines.push(line);
    }
    for k in volumes["kept"].as_array().into_iter().flatten() {
        lines.push(format!(
            "volume {}: {} of data kept on {} that no attachment names (a volume no longer \
             declared, or one that moved on after its node was lost); delete it on the node \
             once it is not wanted",
            value_text(&k["volume"]),
            approx_bytes(k["used"].as_u64().unwrap_or(0)),
            value_text(&k["node"]),
        ));
    }
    lines
}

/// `bytes` for people, to a tenth of a binary unit (`0`, `512`, `1.5Mi`, `20.0Gi`).
fn approx_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["Ki", "Mi", "Gi", "Ti", "Pi"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

/// What `cca status` says of a service's init steps (the `init` of its `/api/status` row):
/// nothing once every instance is through them; else the counts, then each instance named
/// that is not done, with the last line a failed step printed.
fn init_lines(init: &Json) -> Vec<String> {
    let Ok(init) = serde_json::from_value::<schema::InitStatus>(init.clone()) else {
        return Vec::new();
    };
    if init.is_done() {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "init ({} steps): {} done, {} running, {} failed, {} waiting",
        init.steps, init.done, init.running, init.failed, init.waiting
    )];
    for one in &init.instances {
        let node = one.node.as_deref().unwrap_or("no node");
        let mut line = format!("{} on {node}: init {}", one.id, one.phase.describe());
        if let schema::InitPhase::Failed { reason, output, .. } = &one.phase {
            if let Some(reason) = reason {
                line.push_str(&format!(": {reason}"));
            }
            if let Some(last) = output.as_deref().and_then(|o| o.lines().last()) {
                line.push_str(&format!(" (last output: {last})"));
            }
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_lines_show_use_against_size_and_data_no_attachment_names() {
        assert!(volume_lines(&Json::Null).is_empty());
        let volumes = json!({
            "attached": [
                {"volume": "data@0", "node": "n3", "instance": "db-0", "size": "1Gi",
                 "persistent": true, "used": 3u64 << 29},
                {"volume": "data@1", "node": "n1", "instance": null, "size": "20Gi",
                 "persistent": true, "used": 1u64 << 20},
                {"volume": "cache", "node": "n2", "instance": "web-1", "size": "1Gi",
                 "persistent": false, "used": null}
            ],
            "kept": [{"volume": "old", "node": "n2", "used": 1536}]
        });
        assert_eq!(
            volume_lines(&volumes),
            [
                "volume data@0: 1Gi on n3, attached to db-0, 1.5Gi used (over its size: \
                 nothing enforces it, see to it)",
                "volume data@1: 20Gi on n1, no instance attached (its data waits there), \
                 1.0Mi used",
                "volume cache: 1Gi on n2, attached to web-1",
                "volume old: 1.5Ki of data kept on n2 that no attachment names (a volume no \
                 longer declared, or one that moved on after its node was lost); delete it on \
                 the node once it is not wanted",
            ]
        );
    }

    #[test]
    fn init_lines_name_the_failed_step_and_its_last_output_line() {
        assert!(init_lines(&Json::Null).is_empty());
        let done = json!({"steps": 2, "done": 3});
        assert!(init_lines(&done).is_empty(), "nothing to say once done");
        let init = json!({
            "steps": 2, "waiting": 0, "running": 1, "failed": 1, "done": 1,
            "instances": [
                {"id": "web-i2", "node": "n1", "phase": "failed", "step": 2, "of": 2,
                 "failures": 3, "reason": "init step 2 of 2 exited with 1; next attempt in 2s",
                 "output": "psql: connection refused\nmigrate: giving up"},
                {"id": "web-i1", "node": "n2", "phase": "running", "step": 1, "of": 2}
            ]
        });
        assert_eq!(
            init_lines(&init),
            [
                "init (2 steps): 1 done, 1 running, 1 failed, 0 waiting",
                "web-i2 on n1: init step 2 of 2 failed 3 times: init step 2 of 2 exited with 1; \
                 next attempt in 2s (last output: migrate: giving up)",
                "web-i1 on n2: init step 1 of 2 running",
            ]
        );
    }

    #[test]
    fn the_control_plane_line_names_the_replicas_and_the_leader() {
        let plane = json!({
            "up": 2, "elected": true, "leader": "b:7420",
            "replicas": [{"id": "a:7420"}, {"id": "b:7420"}],
        });
        assert_eq!(
            control_plane_line(&plane).as_deref(),
            Some("control plane: 2 replicas up (a:7420, b:7420); leader: b:7420")
        );
        let vacant = json!({"elected": true, "leader": null, "replicas": [{"id": "a"}]});
        assert_eq!(
            control_plane_line(&vacant).as_deref(),
            Some("control plane: 1 replica up (a); leader: none (an election is under way)")
        );
        assert_eq!(control_plane_line(&Json::Null), None);
    }

    #[test]
    fn the_network_column_says_what_is_in_force_and_why_not_newer() {
        assert_eq!(network_text(&Json::Null), "-");
        assert_eq!(network_text(&json!({"revision": 0, "guarded": 0})), "none");
        assert_eq!(
            network_text(&json!({"revision": 26, "guarded": 1})),
            "revision 26 (1 guarded port)"
        );
        assert_eq!(
            network_text(&json!({"revision": 26, "guarded": 2, "error": "nft refused it"})),
            "revision 26 (2 guarded ports); not applied: nft refused it"
        );
    }
}
