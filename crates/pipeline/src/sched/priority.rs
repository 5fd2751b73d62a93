//! Strict priority: the runnable child with the lowest priority value
//! runs (0 is the most urgent).

use super::{Placement, TcError, TcId, Usage};

#[derive(Debug, Default)]
pub struct Priority {
    /// (priority, child), sorted by priority.
    children: Vec<(u32, TcId)>,
}

impl Priority {
    pub fn add_child(&mut self, child: TcId, name: &str, p: &Placement) -> Result<(), TcError> {
        let prio = p.priority.ok_or_else(|| TcError::Placement {
            class: name.to_string(),
            msg: "a child of a priority class needs priority=N".into(),
        })?;
        if self.children.iter().any(|&(q, _)| q == prio) {
            return Err(TcError::Placement {
                class: name.to_string(),
                msg: format!("priority {prio} is already taken by a sibling"),
            });
        }
        let at = self.children.partition_point(|&(q, _)| q < prio);
        self.children.insert(at, (prio, child));
        Ok(())
    }
    pub fn pick(&mut self, runnable: impl Fn(TcId) -> bool) -> Option<TcId> {
        self.children.iter().map(|&(_, c)| c).find(|&c| runnable(c))
    }
    pub fn account(&mut self, _child: TcId, _usage: &Usage) {}
    pub fn children(&self) -> impl Iterator<Item = TcId> + '_ {
        self.children.iter().map(|&(_, c)| c)
    }
}
