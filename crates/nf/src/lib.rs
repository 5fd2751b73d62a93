//! Network functions: NAT, bridge, Maglev LB, policer, firewall, LPM router
