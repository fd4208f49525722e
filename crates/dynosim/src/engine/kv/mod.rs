//! KV cache models.
