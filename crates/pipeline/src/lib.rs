//! The SoftNIC layer: modules, metadata, workers, scheduler, config language
#![forbid(unsafe_code)]

pub mod counters;
pub mod metadata;
pub mod module;
pub mod sched;
pub mod graph;
mod runtime;
pub mod pipeline;
pub mod args;
pub mod modules;
pub mod harness;
