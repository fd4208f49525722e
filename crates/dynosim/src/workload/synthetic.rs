//! The synthetic workload generator.
