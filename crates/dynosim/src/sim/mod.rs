//! The virtual-time simulation: event loop, arrival drivers, topologies.
