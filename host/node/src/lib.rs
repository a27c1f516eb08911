//! The native half of the `toolgate` npm package: one handle over the
//! store's daemon (when one serves the store) or a host in this process,
//! carrying JSON requests of the daemon's protocol, each answered on
//! libuv's thread pool so the event loop never waits on a policy. The typed
//! surface (`Toolgate`, decisions, errors) is JavaScript, in `index.js`;
//! this module stays a thin, checked pipe.
//!
//! An embedding process is the agent's: it may ask for decisions, report
//! outcomes and read the gates, never resolve a pause (see
//! [`toolgate_engine::route::admit_from_an_agent`]).
//!
//! A failure rejects with an `Error` whose message is JSON, `{"kind",
//! "message"}` (`kind` as the daemon's protocol names it), which `index.js`
//! turns into its typed errors.

use std::path::PathBuf;
use std::sync::Arc;

use napi::bindgen_prelude::AsyncTask;
use napi::{Env, Task};
use napi_derive::napi;
use toolgate_engine::locations::StoreLocation;
use toolgate_engine::route::{Place, Target, admit_from_an_agent};
use toolgate_engine::service::DaemonRequest;
use toolgate_engine::{Config, Error};

/// `err` as a rejection `index.js` can type.
fn rejection(err: Error) -> napi::Error {
    let kind = serde_json::to_value(err.kind()).unwrap_or_default();
    let reason = serde_json::json!({"kind": kind, "message": err.report()});
    napi::Error::from_reason(reason.to_string())
}

/// Opening a host: loading the config and the policies (compiling them
/// when the cache has not), or finding the daemon.
pub struct Open {
    config: Option<String>,
    store: Option<String>,
    socket: Option<String>,
}

impl Task for Open {
    type Output = Target;
    type JsValue = Host;

    fn compute(&mut self) -> napi::Result<Target> {
        let named = self.config.is_some();
        let config = match &self.config {
            Some(path) => Config::load(path.as_ref()),
            None => Config::bundled_default(),
        }
        .map_err(rejection)?;
        let place = Place {
            config: &config,
            named,
            store: self.store.take().map(StoreLocation::from),
        };
        place
            .target(self.socket.as_ref().map(PathBuf::from).as_deref())
            .map_err(rejection)
    }

    fn resolve(&mut self, _env: Env, target: Target) -> napi::Result<Host> {
        Ok(Host {
            target: Arc::new(target),
        })
    }
}

/// Open `config` (a file; default: the bundled default config and
/// policies) over `store` (default: the config's), through the daemon at
/// `socket` or the store's when one answers.
#[napi(ts_return_type = "Promise<Host>")]
pub fn open(
    config: Option<String>,
    store: Option<String>,
    socket: Option<String>,
) -> AsyncTask<Open> {
    AsyncTask::new(Open {
        config,
        store,
        socket,
    })
}

/// A toolgate host as an agent runtime reaches it.
#[napi]
pub struct Host {
    target: Arc<Target>,
}

/// One request, answered off the event loop.
pub struct Request {
    target: Arc<Target>,
    request: String,
}

impl Task for Request {
    type Output = String;
    type JsValue = String;

    fn compute(&mut self) -> napi::Result<String> {
        let request: DaemonRequest = serde_json::from_str(&self.request)
            .map_err(|err| rejection(Error::Request(err.to_string())))?;
        admit_from_an_agent(&request).map_err(rejection)?;
        let answer = self.target.call(request).map_err(rejection)?;
        Ok(answer.to_string())
    }

    fn resolve(&mut self, _env: Env, answer: String) -> napi::Result<String> {
        Ok(answer)
    }
}

#[napi]
impl Host {
    /// Send one request of the daemon's protocol (JSON text); its result
    /// as JSON text.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn request(&self, request: String) -> AsyncTask<Request> {
        AsyncTask::new(Request {
            target: Arc::clone(&self.target),
            request,
        })
    }

    /// Whether requests go to the store's daemon (else: this process).
    #[napi(getter)]
    pub fn through_daemon(&self) -> bool {
        matches!(*self.target, Target::Daemon(_))
    }
}

/// The WIT contract's version this build speaks.
#[napi]
pub const CONTRACT_VERSION: &str = toolgate_engine::WIT_VERSION;
