//! `toolgate:policy/state`: private key-value state over redb.

use super::{MAX_LIST, cut};
use crate::bindings::toolgate::policy::state::{Host, StateError};
use crate::sandbox::SandboxState;
use crate::store::{MAX_STATE_KEY, StateWriteError};

impl From<StateWriteError> for StateError {
    fn from(err: StateWriteError) -> Self {
        match err {
            StateWriteError::QuotaExceeded(_) => StateError::QuotaExceeded,
            StateWriteError::TooLarge => StateError::TooLarge,
            StateWriteError::Storage(message) => StateError::Storage(message),
        }
    }
}

impl Host for SandboxState {
    fn get(&mut self, key: String) -> Option<Vec<u8>> {
        let call = &self.call;
        if key.len() > MAX_STATE_KEY {
            return None; // no such key can exist
        }
        call.store
            .state_get(&call.policy, &key)
            .inspect_err(
                |err| tracing::warn!(policy = %call.policy, error = %err, "state read failed"),
            )
            .ok()
            .flatten()
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), StateError> {
        let call = &self.call;
        Ok(call
            .store
            .state_put(&call.policy, &key, Some(&value), call.state_quota)?)
    }

    fn delete(&mut self, key: String) -> Result<(), StateError> {
        let call = &self.call;
        Ok(call
            .store
            .state_put(&call.policy, &key, None, call.state_quota)?)
    }

    fn list_keys(&mut self, prefix: String, limit: u32) -> Vec<String> {
        let call = &self.call;
        call.store
            .state_keys(
                &call.policy,
                &cut(prefix, MAX_STATE_KEY),
                (limit as usize).min(MAX_LIST),
            )
            .inspect_err(
                |err| tracing::warn!(policy = %call.policy, error = %err, "state scan failed"),
            )
            .unwrap_or_default()
    }

    fn try_increment(&mut self, key: String, limit: u64) -> Result<Option<u64>, StateError> {
        let call = &self.call;
        Ok(call
            .store
            .state_try_increment(&call.policy, &key, limit, call.state_quota)?)
    }
}
