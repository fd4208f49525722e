//! The `--router-config` JSON object (KvRouterConfig). Round robin accepts and ignores it; the
//! KV router (a later issue) reads its fields.

use crate::error::{Error, Result};

/// Validated router configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouterConfig {
    /// The JSON object as given (validated key set); typed fields are added with the KV router.
    pub raw: serde_json::Map<String, serde_json::Value>,
}

impl RouterConfig {
    pub fn from_json(flag: &str, text: &str) -> Result<Self> {
        let _ = (flag, text);
        Err(Error::usage("router-config parsing is not implemented yet"))
    }
}
