//! The one place the WIT contract (`wit/`) becomes Rust for the host.

wasmtime::component::bindgen!({
    world: "policy",
    path: "../wit",
});
