//! Routers: which (worker, rank) target receives each request.

pub mod round_robin;
