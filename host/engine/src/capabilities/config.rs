//! `wasi:config/store`: the calling policy's own config table, read-only.
//!
//! One entry per top-level key of the policy's table in the host config,
//! each value JSON-encoded (a TOML string `"x"` reads as `"\"x\""`), so a
//! policy rebuilds its typed config without guessing types. A policy sees its
//! own table and nothing else of the host config.

use crate::bindings::wasi::config::store::{Error, Host};
use crate::sandbox::SandboxState;

impl Host for SandboxState {
    fn get(&mut self, key: String) -> Result<Option<String>, Error> {
        Ok(self
            .call
            .config
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone()))
    }

    fn get_all(&mut self) -> Result<Vec<(String, String)>, Error> {
        Ok(self.call.config.to_vec())
    }
}
