//! The cluster shape flags `cca dev` and `cca chaos` share: how many nodes, their capacity
//! (cpu, memory, storage for volumes), zones and labels.

use ccattler_core::schema::{Cpu, Memory};

use super::flags::{parse_cpu, parse_label, parse_memory, parse_zone};

/// `--nodes`, `--node-cpu`, `--node-memory`, `--node-storage`, `--zones`, `--labels`.
#[derive(Debug, Clone, clap::Args)]
pub struct ShapeArgs {
    /// How many nodes to run (n1..nN), each with its own agent.
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub nodes: u32,
    /// Allocatable CPU of each node: cores (`2`) or millicores (`500m`).
    #[arg(long, value_name = "CPU", default_value = "2", value_parser = parse_cpu)]
    pub node_cpu: Cpu,
    /// Allocatable memory of each node (`512Mi`, `2Gi`).
    #[arg(long, value_name = "MEMORY", default_value = "2Gi", value_parser = parse_memory)]
    pub node_memory: Memory,
    /// Storage each node offers to volumes (`20Gi`).
    #[arg(long, value_name = "SIZE", default_value = "20Gi", value_parser = parse_memory)]
    pub node_storage: Memory,
    /// Zones given to the nodes round-robin (`--zones a,b,c`); none by default.
    #[arg(long, value_name = "ZONES", value_delimiter = ',', value_parser = parse_zone)]
    pub zones: Vec<String>,
    /// Labels set on every node (`--labels disk=ssd,tier=web`).
    #[arg(long, value_name = "K=V", value_delimiter = ',', value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
}

impl ShapeArgs {
    /// The zone of the `index`-th node (0-based), round-robin over `--zones`.
    pub fn zone(&self, index: usize) -> Option<&str> {
        (!self.zones.is_empty()).then(|| self.zones[index % self.zones.len()].as_str())
    }

    /// The flags that give this shape again, for a command line a person can rerun.
    pub fn to_flags(&self) -> Vec<String> {
        let mut flags = vec![
            format!("--nodes {}", self.nodes),
            format!("--node-cpu {}", self.node_cpu),
            format!("--node-memory {}", self.node_memory),
            format!("--node-storage {}", self.node_storage),
        ];
        if !self.zones.is_empty() {
            flags.push(format!("--zones {}", self.zones.join(",")));
        }
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            flags.push(format!("--labels {}", labels.join(",")));
        }
        flags
    }
}
