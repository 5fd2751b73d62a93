//! Strict mode: every datasheet rule a driver breaks is recorded with the
//! section that states it. Recording is bounded (a driver looping on a
//! bug at line rate must not exhaust memory); the total is always counted.

use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Datasheet section (82599 rev 3.3) or other source naming the rule,
    /// e.g. `"8.2.3.8.1"`, `"4.6.3"`, `"TinyNF (empirical)"`.
    pub section: &'static str,
    /// What the driver did and what the rule says.
    pub rule: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self
            .section
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
        {
            write!(f, "§{}: {}", self.section, self.rule)
        } else {
            write!(f, "{}: {}", self.section, self.rule)
        }
    }
}

/// At most this many violations are kept; later ones are only counted.
const KEEP: usize = 1024;

/// The violation log of one device.
#[derive(Debug, Default)]
pub(crate) struct Strict {
    enabled: bool,
    log: Mutex<Vec<Violation>>,
    total: AtomicU64,
}

impl Strict {
    pub fn new(enabled: bool) -> Self {
        Strict {
            enabled,
            ..Default::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Record a broken rule (the message is built only in strict mode).
    pub fn record(&self, section: &'static str, rule: impl FnOnce() -> String) {
        if !self.enabled {
            return;
        }
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut log = self.log.lock();
        if log.len() < KEEP {
            let rule = rule();
            tracing::debug!(section, %rule, "82599 model: datasheet rule broken");
            log.push(Violation { section, rule });
        }
    }

    pub fn list(&self) -> Vec<Violation> {
        self.log.lock().clone()
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn clear(&self) {
        self.log.lock().clear();
        self.total.store(0, Ordering::Relaxed);
    }
}
