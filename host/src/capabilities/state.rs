//! `toolgate:policy/state`: private key-value state over the store.

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

/// A failed read, logged for the operator and told to the policy as such
/// (never as "no data").
fn read_failed(policy: &str, err: crate::Error) -> StateError {
    tracing::warn!(policy, error = %err, "state read failed");
    StateError::Storage(err.to_string())
}

impl Host for SandboxState {
    fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.get_many(vec![key])?.pop().flatten())
    }

    fn get_many(&mut self, mut keys: Vec<String>) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        let asked = keys.len();
        keys.truncate(MAX_LIST);
        // A key longer than any the host stores cannot exist: read as none.
        let readable: Vec<&str> = keys
            .iter()
            .filter(|k| k.len() <= MAX_STATE_KEY)
            .map(String::as_str)
            .collect();
        let call = &self.call;
        let mut found = call
            .store
            .state_get_many(&call.policy, &readable)
            .map_err(|err| read_failed(&call.policy, err))?
            .into_iter();
        let mut values: Vec<_> = keys
            .iter()
            .map(|k| {
                if k.len() <= MAX_STATE_KEY {
                    found.next().flatten()
                } else {
                    None
                }
            })
            .collect();
        values.resize(asked, None);
        Ok(values)
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

    fn list_keys(&mut self, prefix: String, limit: u32) -> Result<Vec<String>, StateError> {
        let call = &self.call;
        call.store
            .state_keys(
                &call.policy,
                &cut(prefix, MAX_STATE_KEY),
                (limit as usize).min(MAX_LIST),
            )
            .map_err(|err| read_failed(&call.policy, err))
    }

    fn try_increment(&mut self, key: String, limit: u64) -> Result<Option<u64>, StateError> {
        let call = &self.call;
        Ok(call
            .store
            .state_try_increment(&call.policy, &key, limit, call.state_quota)?)
    }
}
