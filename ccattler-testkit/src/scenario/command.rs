//! The commands of a scenario file and their parser: one command per line.

use ccattler_core::schema::{Health, ObservedState};
use ccattler_core::{Key, Value};

use super::attrs::{NodeAttr, ServiceAttr, parse_node_attr, parse_service_attr};
use super::query::{Selector, parse_selector};

/// One parsed line.
#[derive(Clone, Debug)]
pub(crate) struct Line {
    /// 1-based line number in the file.
    pub number: usize,
    /// What the line asks for.
    pub command: Command,
}

/// What a line asks for.
#[derive(Clone, Debug)]
pub(crate) enum Command {
    /// `----`: the start of the next step (only for readability and error messages).
    Separator,
    /// `node NAME ATTR...`: declare a node (or change the attributes named) and give it a lease.
    Node { name: String, attrs: Vec<NodeAttr> },
    /// `node NAME dead|alive`: delete or restore the node's lease.
    Liveness { name: String, alive: bool },
    /// `service NAME ATTR...`: declare a service (or change only the attributes named).
    Service {
        name: String,
        attrs: Vec<ServiceAttr>,
    },
    /// `delete service NAME`.
    DeleteService { name: String },
    /// `fact put KEY VALUE`: put any fact (VALUE is the rest of the line).
    FactPut { key: Key, value: Value },
    /// `fact delete KEY`: delete any fact.
    FactDelete { key: Key },
    /// `intent NAME N`: the autoscaler recommends N instances.
    Intent { service: String, instances: u32 },
    /// `observe SELECTOR STATE [ready|unready] [healthy|unhealthy]`.
    Observe {
        selector: Selector,
        state: ObservedState,
        ready: Option<bool>,
        health: Option<Health>,
    },
    /// `run`: controllers and agents to a fixpoint.
    Run,
    /// `round [N]`: N rounds of every controller then the agents, fixpoint or not.
    Round(u32),
    /// `step CONTROLLER`: one reconcile of one controller, committed.
    Step(String),
    /// `agents`: one pass of every live node's agent, even when agents are off.
    Agents,
    /// `agents on|off`.
    AgentsSwitch(bool),
    /// `restart controllers`.
    RestartControllers,
    /// `snapshot plan CONTROLLER [as NAME]` or `snapshot facts PREFIX [as NAME]`.
    Snapshot {
        what: SnapshotOf,
        name: Option<String>,
    },
    /// `expect ...`.
    Expect(Expectation),
}

/// What a `snapshot` records.
#[derive(Clone, Debug)]
pub(crate) enum SnapshotOf {
    /// The changes a controller proposes on the current facts (not applied).
    Plan(String),
    /// The facts under a prefix.
    Facts(String),
}

/// One `expect` line.
#[derive(Clone, Debug)]
pub(crate) enum Expectation {
    /// `expect placements SVC [NODE=N...]`: placements on live nodes, exactly.
    Placements {
        service: String,
        counts: Vec<(String, usize)>,
    },
    /// `expect unsatisfied SVC N [TEXT]`: unschedulable count; every reason contains TEXT.
    Unsatisfied {
        service: String,
        count: usize,
        reason: Option<String>,
    },
    /// `expect instances SVC KEY=N...` with keys running, stopped, current, outdated, total.
    Instances {
        service: String,
        counts: Vec<(String, usize)>,
    },
    /// `expect observed SVC STATE=N...` with observed states and `none`.
    Observed {
        service: String,
        counts: Vec<(String, usize)>,
    },
    /// `expect instance SELECTOR running|stopped|gone`.
    Instance { selector: Selector, state: String },
    /// `expect status SVC FIELD=V...` or `expect status SVC none`.
    Status {
        service: String,
        fields: Option<Vec<(String, String)>>,
    },
    /// `expect endpoints SVC N` or `expect endpoints SVC none`.
    Endpoints {
        service: String,
        count: Option<usize>,
    },
    /// `expect effective SVC N`.
    Effective { service: String, instances: u32 },
    /// `expect no-changes [CONTROLLER]`.
    NoChanges(Option<String>),
    /// `expect fact KEY VALUE` (the rest of the line, exactly) or `expect fact KEY none`.
    Fact { key: Key, value: Option<String> },
}

/// Parses a whole file. Errors are `(line, message)`.
pub(crate) fn parse(text: &str) -> Result<Vec<Line>, (usize, String)> {
    let mut lines = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let content = strip_comment(raw).trim();
        if content.is_empty() {
            continue;
        }
        let words: Vec<&str> = content.split_whitespace().collect();
        let command = parse_line(&words, content).map_err(|message| (number, message))?;
        lines.push(Line { number, command });
    }
    Ok(lines)
}

/// `#` starts a comment at the start of a line or after whitespace (`web#0` is a selector).
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return &line[..i];
        }
    }
    line
}

/// The line after its first `n` words, trimmed.
fn after_words(line: &str, n: usize) -> &str {
    let mut rest = line;
    for _ in 0..n {
        let word = rest.trim_start();
        rest = word
            .find(char::is_whitespace)
            .map_or("", |end| &word[end..]);
    }
    rest.trim()
}

fn parse_key(word: &str) -> Result<Key, String> {
    Key::new(word).map_err(|e| e.to_string())
}

fn parse_line(words: &[&str], line: &str) -> Result<Command, String> {
    let rest = &words[1..];
    Ok(match words[0] {
        w if w.chars().all(|c| c == '-') && w.len() >= 3 => Command::Separator,
        "node" => parse_node(rest)?,
        "service" => {
            let (name, attrs) = rest.split_first().ok_or("`service` needs a name")?;
            let attrs = attrs
                .iter()
                .map(|a| parse_service_attr(a))
                .collect::<Result<_, _>>()?;
            Command::Service {
                name: (*name).to_owned(),
                attrs,
            }
        }
        "delete" => match rest {
            ["service", name] => Command::DeleteService {
                name: (*name).to_owned(),
            },
            _ => return Err("expected `delete service NAME`".into()),
        },
        "fact" => match rest {
            ["put", key, _, ..] => Command::FactPut {
                key: parse_key(key)?,
                value: Value::from(after_words(line, 3).to_owned()),
            },
            ["delete", key] => Command::FactDelete {
                key: parse_key(key)?,
            },
            _ => return Err("expected `fact put KEY VALUE` or `fact delete KEY`".into()),
        },
        "intent" => match rest {
            [service, n] => Command::Intent {
                service: (*service).to_owned(),
                instances: number(n)?,
            },
            _ => return Err("expected `intent SERVICE COUNT`".into()),
        },
        "observe" => parse_observe(rest)?,
        "run" if rest.is_empty() => Command::Run,
        "round" => match rest {
            [] => Command::Round(1),
            [n] => Command::Round(number(n)?),
            _ => return Err("expected `round [COUNT]`".into()),
        },
        "step" => match rest {
            [controller] => Command::Step((*controller).to_owned()),
            _ => return Err("expected `step CONTROLLER`".into()),
        },
        "agents" => match rest {
            [] => Command::Agents,
            ["on"] => Command::AgentsSwitch(true),
            ["off"] => Command::AgentsSwitch(false),
            _ => return Err("expected `agents`, `agents on` or `agents off`".into()),
        },
        "restart" if rest == ["controllers"] => Command::RestartControllers,
        "snapshot" => parse_snapshot(rest)?,
        "expect" => Command::Expect(parse_expect(rest, line)?),
        other => {
            return Err(format!(
                "unknown command `{other}` (or wrong arguments); expected one of node, service, \
                 delete, fact, intent, observe, run, round, step, agents, restart, snapshot, \
                 expect, ----"
            ));
        }
    })
}

fn parse_node(rest: &[&str]) -> Result<Command, String> {
    match rest {
        [] => Err("`node` needs a name".into()),
        [name, "dead"] | [name, "alive"] => Ok(Command::Liveness {
            name: (*name).to_owned(),
            alive: rest[1] == "alive",
        }),
        [name, attrs @ ..] => Ok(Command::Node {
            name: (*name).to_owned(),
            attrs: attrs
                .iter()
                .map(|a| parse_node_attr(a))
                .collect::<Result<_, _>>()?,
        }),
    }
}

fn parse_observe(rest: &[&str]) -> Result<Command, String> {
    let [selector, state, flags @ ..] = rest else {
        return Err("expected `observe SELECTOR STATE [ready|unready] [healthy|unhealthy]`".into());
    };
    let mut ready = None;
    let mut health = None;
    for flag in flags {
        match *flag {
            "ready" => ready = Some(true),
            "unready" => ready = Some(false),
            "healthy" => health = Some(Health::Healthy),
            "unhealthy" => health = Some(Health::Unhealthy),
            other => {
                return Err(format!(
                    "unknown flag `{other}`; expected ready, unready, healthy or unhealthy"
                ));
            }
        }
    }
    Ok(Command::Observe {
        selector: parse_selector(selector)?,
        state: observed_state(state)?,
        ready,
        health,
    })
}

fn parse_snapshot(rest: &[&str]) -> Result<Command, String> {
    let (what, name) = match rest {
        [kind, arg] => ((*kind, *arg), None),
        [kind, arg, "as", name] => ((*kind, *arg), Some((*name).to_owned())),
        _ => return Err(
            "expected `snapshot plan CONTROLLER [as NAME]` or `snapshot facts PREFIX [as NAME]`"
                .into(),
        ),
    };
    let what = match what {
        ("plan", controller) => SnapshotOf::Plan(controller.to_owned()),
        ("facts", prefix) => SnapshotOf::Facts(prefix.to_owned()),
        (other, _) => return Err(format!("cannot snapshot `{other}`; expected plan or facts")),
    };
    Ok(Command::Snapshot { what, name })
}

/// `line` is the whole line, `expect` included.
fn parse_expect(rest: &[&str], line: &str) -> Result<Expectation, String> {
    let owned = |s: &&str| (*s).to_owned();
    Ok(match rest {
        ["fact", key, "none"] => Expectation::Fact {
            key: parse_key(key)?,
            value: None,
        },
        ["fact", key, _, ..] => Expectation::Fact {
            key: parse_key(key)?,
            value: Some(after_words(line, 3).to_owned()),
        },
        ["placements", service, counts @ ..] => Expectation::Placements {
            service: owned(service),
            counts: pairs(counts, number)?,
        },
        ["unsatisfied", service, count, reason @ ..] => Expectation::Unsatisfied {
            service: owned(service),
            count: number(count)?,
            reason: (!reason.is_empty()).then(|| reason.join(" ").trim_matches('"').to_owned()),
        },
        ["instances", service, counts @ ..] if !counts.is_empty() => Expectation::Instances {
            service: owned(service),
            counts: pairs(counts, number)?,
        },
        ["observed", service, counts @ ..] if !counts.is_empty() => Expectation::Observed {
            service: owned(service),
            counts: pairs(counts, number)?,
        },
        [
            "instance",
            selector,
            state @ ("running" | "stopped" | "gone"),
        ] => Expectation::Instance {
            selector: parse_selector(selector)?,
            state: owned(state),
        },
        ["status", service, "none"] => Expectation::Status {
            service: owned(service),
            fields: None,
        },
        ["status", service, fields @ ..] if !fields.is_empty() => Expectation::Status {
            service: owned(service),
            fields: Some(pairs(fields, |v| Ok(v.to_owned()))?),
        },
        ["endpoints", service, "none"] => Expectation::Endpoints {
            service: owned(service),
            count: None,
        },
        ["endpoints", service, count] => Expectation::Endpoints {
            service: owned(service),
            count: Some(number(count)?),
        },
        ["effective", service, count] => Expectation::Effective {
            service: owned(service),
            instances: number(count)?,
        },
        ["no-changes"] => Expectation::NoChanges(None),
        ["no-changes", controller] => Expectation::NoChanges(Some(owned(controller))),
        _ => {
            return Err(
                "unknown expectation; expected `expect` fact, placements, unsatisfied, \
                        instances, observed, instance, status, endpoints, effective or no-changes \
                        with their arguments"
                    .into(),
            );
        }
    })
}

/// `KEY=VALUE` words.
fn pairs<T>(
    words: &[&str],
    value: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<(String, T)>, String> {
    words
        .iter()
        .map(|w| {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("expected KEY=VALUE, found `{w}`"))?;
            Ok((k.to_owned(), value(v)?))
        })
        .collect()
}

/// A non-negative whole number.
pub(crate) fn number<T: std::str::FromStr>(word: &str) -> Result<T, String> {
    word.parse()
        .map_err(|_| format!("expected a whole number, found `{word}`"))
}

/// An observed state by its schema name.
pub(crate) fn observed_state(word: &str) -> Result<ObservedState, String> {
    Ok(match word {
        "pending" => ObservedState::Pending,
        "pulling" => ObservedState::Pulling,
        "starting" => ObservedState::Starting,
        "running" => ObservedState::Running,
        "exited" => ObservedState::Exited,
        "failed" => ObservedState::Failed,
        "stopped" => ObservedState::Stopped,
        other => {
            return Err(format!(
                "unknown state `{other}`; expected pending, pulling, starting, running, exited, \
                 failed or stopped"
            ));
        }
    })
}
