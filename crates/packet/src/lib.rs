//! Packets: typed headers, checksums, flow keys, builders
