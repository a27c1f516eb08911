//! The native half of the `toolgate` Python package: one handle over the
//! store's daemon (when one serves the store) or a host in this process,
//! carrying JSON requests of the daemon's protocol. The typed surface
//! (`toolgate.Toolgate`, `Decision`, `Pause`) is Python, in
//! `python/toolgate/__init__.py`; this module stays a thin, checked pipe.
//!
//! An embedding process is the agent's: it may ask for decisions, report
//! outcomes and read the gates, never resolve a pause (see
//! [`toolgate_engine::route::admit_from_an_agent`]). The GIL is released while toolgate
//! works, so other Python threads run meanwhile.

use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use toolgate_engine::locations::StoreLocation;
use toolgate_engine::route::{Place, Target, admit_from_an_agent};
use toolgate_engine::service::DaemonRequest;
use toolgate_engine::{Config, Error, ErrorKind};

create_exception!(
    _native,
    ToolgateError,
    PyException,
    "Any failure of toolgate's; its subclasses say what sort."
);
create_exception!(
    _native,
    ConfigError,
    ToolgateError,
    "The config is invalid."
);
create_exception!(
    _native,
    PluginError,
    ToolgateError,
    "A plugin could not be loaded."
);
create_exception!(
    _native,
    StoreError,
    ToolgateError,
    "The store could not be opened or used."
);
create_exception!(
    _native,
    BusyError,
    ToolgateError,
    "The store or the daemon is busy: try again shortly."
);
create_exception!(
    _native,
    RequestError,
    ToolgateError,
    "The request was malformed (a tool call toolgate cannot read)."
);
create_exception!(
    _native,
    DaemonUnreachable,
    ToolgateError,
    "No toolgate daemon answers at the socket named."
);
create_exception!(
    _native,
    NotAllowed,
    ToolgateError,
    "The caller may not do this (resolving a pause is a person's)."
);

/// `err` as the Python exception of its kind, with toolgate's whole message.
fn raise(err: Error) -> PyErr {
    let message = err.report();
    match err.kind() {
        ErrorKind::Config => ConfigError::new_err(message),
        ErrorKind::Plugin => PluginError::new_err(message),
        ErrorKind::Store => StoreError::new_err(message),
        ErrorKind::Busy => BusyError::new_err(message),
        ErrorKind::InvalidRequest => RequestError::new_err(message),
        ErrorKind::Unreachable => DaemonUnreachable::new_err(message),
        ErrorKind::Unauthorized => NotAllowed::new_err(message),
        _ => ToolgateError::new_err(message),
    }
}

/// A toolgate host as an agent runtime reaches it.
#[pyclass(frozen, module = "toolgate._native")]
struct Host {
    target: Target,
}

#[pymethods]
impl Host {
    /// Open `config` (a file; default: the bundled default config and
    /// policies) over `store` (default: the config's), through the
    /// daemon at `socket` or the store's when one answers.
    #[new]
    #[pyo3(signature = (config=None, store=None, socket=None))]
    fn new(
        py: Python<'_>,
        config: Option<PathBuf>,
        store: Option<String>,
        socket: Option<PathBuf>,
    ) -> PyResult<Self> {
        py.detach(|| {
            let named = config.is_some();
            let config = match &config {
                Some(path) => Config::load(path)?,
                None => Config::bundled_default()?,
            };
            let place = Place {
                config: &config,
                named,
                store: store.map(StoreLocation::from),
            };
            Ok(Host {
                target: place.target(socket.as_deref())?,
            })
        })
        .map_err(raise)
    }

    /// Send one request of the daemon's protocol (JSON text); its result
    /// as JSON text.
    fn request(&self, py: Python<'_>, request: &str) -> PyResult<String> {
        py.detach(|| {
            let request: DaemonRequest =
                serde_json::from_str(request).map_err(|err| Error::Request(format!("{err}")))?;
            admit_from_an_agent(&request)?;
            let answer = self.target.call(request)?;
            Ok(answer.to_string())
        })
        .map_err(raise)
    }

    /// Whether requests go to the store's daemon (else: this process).
    #[getter]
    fn through_daemon(&self) -> bool {
        matches!(self.target, Target::Daemon(_))
    }
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add_class::<Host>()?;
    module.add("ToolgateError", py.get_type::<ToolgateError>())?;
    module.add("ConfigError", py.get_type::<ConfigError>())?;
    module.add("PluginError", py.get_type::<PluginError>())?;
    module.add("StoreError", py.get_type::<StoreError>())?;
    module.add("BusyError", py.get_type::<BusyError>())?;
    module.add("RequestError", py.get_type::<RequestError>())?;
    module.add("DaemonUnreachable", py.get_type::<DaemonUnreachable>())?;
    module.add("NotAllowed", py.get_type::<NotAllowed>())?;
    module.add("CONTRACT_VERSION", toolgate_engine::WIT_VERSION)?;
    Ok(())
}
