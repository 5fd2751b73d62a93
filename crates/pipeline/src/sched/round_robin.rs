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
        let n = self.children.len();
        (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&i| runnable(self.children[i]))
            .map(|i| {
                self.next = (i + 1) % n;
                self.children[i]
            })
    }
    pub fn account(&mut self, _child: TcId, _usage: &Usage) {}
    pub fn children(&self) -> impl Iterator<Item = TcId> + '_ {
        self.children.iter().copied()
    }
}
