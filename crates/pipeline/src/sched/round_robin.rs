//! Plain round robin over the runnable children.

use super::{TcId, Usage};

#[derive(Debug, Default)]
pub struct RoundRobin {
    children: Vec<TcId>,
    next: usize,
}

impl RoundRobin {
    pub fn add_child(&mut self, child: TcId) {
        self.children.push(child);
    }
    pub fn pick(&mut self, runnable: impl Fn(TcId) -> bool) -> Option<TcId> {
        // Wrap by comparison, not `%`: a division every round costs more
        // than the rest of the pick.
        let n = self.children.len();
        let mut i = self.next;
        for _ in 0..n {
            if i >= n {
                i = 0;
            }
            let child = self.children[i];
            i += 1;
            if runnable(child) {
                self.next = i;
                return Some(child);
            }
        }
        None
    }
    pub fn account(&mut self, _child: TcId, _usage: &Usage) {}
    pub fn children(&self) -> impl Iterator<Item = TcId> + '_ {
        self.children.iter().copied()
    }
}
