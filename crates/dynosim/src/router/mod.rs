//! Routers: which (worker, rank) target receives each request.

pub mod kv;
pub mod round_robin;
