//! Test tooling: network namespaces, veth pairs, skips, traffic checks
