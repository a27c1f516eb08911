//! toolgate's integration tests, one module per concern, in one binary:
//! the host with real policy components built from source, its CLI, daemon,
//! gateway, stores and docs. The real agent clients (`real_clients.rs`) and
//! what must run alone (`alone.rs`) are binaries of their own.

mod common;

mod architecture;
mod audit;
mod authoring;
mod claude_code;
mod cli;
mod composition;
mod context_cost;
mod cursor;
mod daemon;
mod dist;
mod docs;
mod doctor;
mod embed_node;
mod embed_python;
mod fail_closed;
mod fleet;
mod flows;
mod gates;
mod gemini_cli;
mod honest;
mod host_calls;
mod http_hooks;
mod inbox;
mod lease_gate;
mod loading;
mod mcp_gateway;
mod notify;
mod oci_plugins;
mod output_phases;
mod parsers;
mod polyglot;
mod reload;
mod rewrite;
mod rollout;
mod rules;
mod sandbox;
mod self_protection;
mod shadow_sentinel;
mod signing;
mod store;
mod trust;
