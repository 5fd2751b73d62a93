//! Weighted fair sharing by stride scheduling (Waldspurger & Weihl,
//! 1995): each child has a stride inversely proportional to its share
//! and a pass that grows by stride × what it consumed; the runnable child
//! with the smallest pass runs next.
//!
//! Passes are 128-bit and strides carry 40 fractional bits, so neither
//! rounding nor overflow skews the shares.

use super::{Placement, Resource, TcError, TcId, Usage};

const STRIDE_ONE: u128 = 1 << 40;

#[derive(Debug)]
struct Child {
    id: TcId,
    stride: u128,
    pass: u128,
}

#[derive(Debug)]
pub struct WeightedFair {
    resource: Resource,
    children: Vec<Child>,
    /// Pass of the last child picked: children returning from a blocked
    /// spell start here rather than claiming the time they missed.
    vtime: u128,
}

impl WeightedFair {
    pub fn new(resource: Resource) -> WeightedFair {
        WeightedFair {
            resource,
            children: Vec::new(),
            vtime: 0,
        }
    }
    pub fn resource(&self) -> Resource {
        self.resource
    }
    pub fn add_child(&mut self, child: TcId, name: &str, p: &Placement) -> Result<(), TcError> {
        let share = p
            .share
            .filter(|&s| s > 0)
            .ok_or_else(|| TcError::Placement {
                class: name.to_string(),
                msg: "a child of a weighted_fair class needs share=N (N >= 1)".into(),
            })?;
        self.children.push(Child {
            id: child,
            stride: STRIDE_ONE / share as u128,
            pass: self.vtime,
        });
        Ok(())
    }
    pub fn pick(&mut self, runnable: impl Fn(TcId) -> bool) -> Option<TcId> {
        let vtime = self.vtime;
        let c = self
            .children
            .iter_mut()
            .filter(|c| runnable(c.id))
            .min_by_key(|c| c.pass.max(vtime))?;
        c.pass = c.pass.max(vtime);
        self.vtime = c.pass;
        Some(c.id)
    }
    pub fn account(&mut self, child: TcId, usage: &Usage) {
        let amount = self.resource.charge(usage);
        if let Some(c) = self.children.iter_mut().find(|c| c.id == child) {
            c.pass += c.stride * amount as u128;
        }
    }
    pub fn children(&self) -> impl Iterator<Item = TcId> + '_ {
        self.children.iter().map(|c| c.id)
    }
}
