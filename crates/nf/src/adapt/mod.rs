//! The three forms an NF runs in, all around the same
//! [`NetworkFunction::process`] call:
//!
//! - [`agent`]: handlers for the agent model (TinyNF), one per input port,
//!   for `nfkit_ixgbe::Agent`s on 82599s and for
//!   `nfkit_port::agent::AgentAdapter` on any ports;
//! - [`queue`]: the queue-model loop over [`nfkit_port::Port`]s (batches
//!   from a pool);
//! - the pipeline module `NF` lives in `nfkit-pipeline` and calls
//!   [`route`]-like logic on its gates.
//!
//! Port numbering is the NF's: port `k` of the NF is output `k` of every
//! agent and port `k` of the loop (LAN = 0, WAN = 1 for the two-port NFs).
//! `now` is read by the caller once per round of batches, never per
//! packet.

pub mod agent;
pub mod queue;
#[cfg(feature = "scenarios")]
pub mod scenarios;

pub use agent::AgentNf;
pub use queue::QueueNf;

use crate::verdict::{PortId, Verdict};

/// Write the per-output lengths of `verdict` into `lens` (indexed by NF
/// port, all 0 on entry). Flooding never includes `in_port`. Returns
/// false if the verdict named a port `lens` does not have (the packet then
/// goes nowhere on that port; the caller counts it).
#[inline]
pub fn write_lengths(verdict: Verdict, in_port: PortId, lens: &mut [u16]) -> bool {
    // The agents reject any length above their buffer size and count it;
    // saturating keeps an absurd length absurd instead of wrapping it.
    let clamp = |len: usize| u16::try_from(len).unwrap_or(u16::MAX);
    match verdict {
        Verdict::Drop(_) => true,
        Verdict::Forward { port, len } => match lens.get_mut(port) {
            Some(l) => {
                *l = clamp(len);
                true
            }
            None => false,
        },
        Verdict::Flood { ports, len } => {
            let mut all_there = true;
            for p in ports.without(in_port).iter() {
                match lens.get_mut(p) {
                    Some(l) => *l = clamp(len),
                    None => all_there = false,
                }
            }
            all_there
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::{DropReason, PortSet};

    #[test]
    fn lengths_follow_the_verdict() {
        let mut l = [0u16; 3];
        assert!(write_lengths(Verdict::Drop(DropReason::Blocked), 0, &mut l));
        assert_eq!(l, [0, 0, 0]);
        assert!(write_lengths(
            Verdict::Forward { port: 0, len: 70 },
            0,
            &mut l
        ));
        assert_eq!(l, [70, 0, 0], "the router sends ICMP errors back out");
        let mut l = [0u16; 3];
        let all = PortSet::first(3);
        assert!(write_lengths(
            Verdict::Flood {
                ports: all,
                len: 60
            },
            1,
            &mut l
        ));
        assert_eq!(l, [60, 0, 60], "never flooded back out of the input");
        let mut l = [0u16; 2];
        assert!(!write_lengths(
            Verdict::Forward { port: 2, len: 60 },
            0,
            &mut l
        ));
        assert!(!write_lengths(
            Verdict::Flood {
                ports: all,
                len: 60
            },
            0,
            &mut l
        ));
        assert_eq!(l, [0, 60]);
        let mut l = [0u16; 1];
        write_lengths(
            Verdict::Forward {
                port: 0,
                len: 70_000,
            },
            0,
            &mut l,
        );
        assert_eq!(l, [u16::MAX]);
    }
}
