//! The SoftNIC layer: modules, metadata, workers, scheduler, config language
#![forbid(unsafe_code)]

pub mod counters;
pub mod metadata;
pub mod module;
pub mod sched;
