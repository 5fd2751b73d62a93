//! A datasheet-faithful software model of the Intel 82599 (sim: ports)
