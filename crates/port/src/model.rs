//! The driver models, one name for the choice every command, NF form
//! and benchmark makes.

use std::fmt;
use std::str::FromStr;

/// How packets move between the driver and the code that handles them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// TinyNF agents on 82599 queues: no pool, packets handled in place
    /// by a handler, output rings in lock-step with the input.
    Agent,
    /// The agent handlers over any [`Port`](crate::Port)s, through
    /// [`AgentAdapter`](crate::agent::AgentAdapter) (what `agent` means on
    /// ports other than two 82599s).
    AgentAdapter,
    /// ixy/DPDK queues: pool buffers in batches.
    Queue,
}

impl Model {
    /// The two models a user chooses between (`--model agent|queue`).
    pub const CHOICES: [Model; 2] = [Model::Agent, Model::Queue];

    /// The name used on command lines and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Model::Agent => "agent",
            Model::AgentAdapter => "agent-adapter",
            Model::Queue => "queue",
        }
    }

    /// The model that runs when `self` is asked for on ports that are
    /// (`on_82599`) or are not all 82599s: agents need 82599 queues, on
    /// other ports they run through the adapter.
    pub fn on(self, on_82599: bool) -> Model {
        match self {
            Model::Agent if !on_82599 => Model::AgentAdapter,
            m => m,
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Model, String> {
        match s {
            "agent" => Ok(Model::Agent),
            "queue" => Ok(Model::Queue),
            "agent-adapter" => Ok(Model::AgentAdapter),
            m => Err(format!("--model {m}: expected agent or queue")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for m in [Model::Agent, Model::AgentAdapter, Model::Queue] {
            assert_eq!(m.name().parse::<Model>(), Ok(m));
        }
        assert!("x".parse::<Model>().unwrap_err().contains("agent or queue"));
        assert_eq!(Model::Agent.on(false), Model::AgentAdapter);
        assert_eq!(Model::Agent.on(true), Model::Agent);
        assert_eq!(Model::Queue.on(false), Model::Queue);
    }
}
