//! The real agent clients, at the releases `tests/real-clients.json` pins,
//! driven offline against scripted model APIs with toolgate installed as
//! their hook: one module per client.

mod common;

mod real_claude_code;
mod real_claude_code_tui;
mod real_codex;
mod real_copilot;
mod real_gemini_cli;
mod real_opencode;
