//! The SoftNIC layer: modules, metadata, workers, scheduler, config language
