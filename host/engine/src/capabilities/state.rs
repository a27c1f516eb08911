//! `toolgate:policy/state`: private key-value state over the store.

use super::MAX_LIST;
use crate::bindings::toolgate::policy::state::{Host, StateError};
use crate::sandbox::SandboxState;
use crate::store::{MAX_STATE_KEY, StateWriteError};

impl From<StateWriteError> for StateError {
    fn from(err: StateWriteError) -> Self {
        match err {
            StateWriteError::QuotaExceeded(_) => StateError::QuotaExceeded,
            StateWriteError::TooLarge => StateError::TooLarge,
            StateWriteError::Storage(err) => StateError::Storage(err.report()),
        }
    }
}

/// A failed read, logged for the operator and told to the policy as such
/// (never as "no data").
fn read_failed(policy: &str, err: crate::Error) -> StateError {
    let why = err.report();
    tracing::warn!(policy, error = %why, "state read failed");
    StateError::Storage(why)
}

impl SandboxState {
    /// The call's snapshot of this policy's namespace, taken on first use.
    fn reads(&mut self) -> Result<&dyn crate::store::StateSnapshot, StateError> {
        let call = &mut self.call;
        if call.reads.is_none() {
            let snapshot = call
                .state
                .state_snapshot(&call.policy)
                .map_err(|err| read_failed(&call.policy, err))?;
            call.reads = Some(snapshot);
        }
        Ok(call.reads.as_deref().expect("set above"))
    }

    /// Whether this call may write: not in a phase that must be pure.
    fn writable(&self) -> Result<(), StateError> {
        if self.call.read_only {
            return Err(StateError::Storage(READ_ONLY.into()));
        }
        Ok(())
    }

    /// A write of the policy's own: later reads in this call must see it.
    fn wrote<T>(&mut self, result: T) -> T {
        self.call.reads = None;
        result
    }
}

/// Whether a key can be stored at all: within the length cap, and without
/// NUL, which PostgreSQL's text cannot hold (so no backend takes it, and a
/// policy behaves the same on every one).
fn storable(key: &str) -> bool {
    key.len() <= MAX_STATE_KEY && !key.contains('\0')
}

/// A write under a key with NUL: refused on every backend.
/// A write in a phase that must be pure (visibility), refused.
const READ_ONLY: &str =
    "state is read-only here: the visibility phase must be pure (see phases.wit)";

fn refuse_nul(key: &str) -> Result<(), StateError> {
    if key.contains('\0') {
        return Err(StateError::Storage(
            "a state key may not contain NUL (a PostgreSQL store cannot hold it); encode the key"
                .into(),
        ));
    }
    Ok(())
}

impl Host for SandboxState {
    fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.get_many(vec![key])?.pop().flatten())
    }

    fn get_many(&mut self, keys: Vec<String>) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        // One answer per key asked, so more keys than the list cap would
        // make an answer past it: refused, as the contract says.
        if keys.len() > MAX_LIST {
            return Err(StateError::TooLarge);
        }
        // A key the host never stores cannot exist: read as none.
        let readable: Vec<&str> = keys
            .iter()
            .filter(|k| storable(k))
            .map(String::as_str)
            .collect();
        let policy = self.call.policy.clone();
        let mut found = self
            .reads()?
            .get_many(&readable)
            .map_err(|err| read_failed(&policy, err))?
            .into_iter();
        let values: Vec<_> = keys
            .iter()
            .map(|k| {
                if storable(k) {
                    found.next().flatten()
                } else {
                    None
                }
            })
            .collect();
        Ok(values)
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), StateError> {
        refuse_nul(&key)?;
        self.writable()?;
        let call = &self.call;
        let written = call
            .state
            .state_put(&call.policy, &key, Some(&value), call.state_quota);
        Ok(self.wrote(written)?)
    }

    fn delete(&mut self, key: String) -> Result<(), StateError> {
        refuse_nul(&key)?;
        self.writable()?;
        let call = &self.call;
        let written = call
            .state
            .state_put(&call.policy, &key, None, call.state_quota);
        Ok(self.wrote(written)?)
    }

    fn list_keys(&mut self, prefix: String, limit: u32) -> Result<Vec<String>, StateError> {
        // No stored key holds NUL or is longer than the cap, so no key
        // starts with such a prefix.
        if !storable(&prefix) {
            return Ok(Vec::new());
        }
        let policy = self.call.policy.clone();
        self.reads()?
            .keys(&prefix, (limit as usize).min(MAX_LIST))
            .map_err(|err| read_failed(&policy, err))
    }

    fn try_increment(&mut self, key: String, limit: u64) -> Result<Option<u64>, StateError> {
        refuse_nul(&key)?;
        self.writable()?;
        let call = &self.call;
        let written = call
            .state
            .state_try_increment(&call.policy, &key, limit, call.state_quota);
        Ok(self.wrote(written)?)
    }
}
