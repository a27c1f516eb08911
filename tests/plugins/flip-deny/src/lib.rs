//! The "deny" version of the flip policy (see `flip.rs`).

const DENIES: bool = true;

include!("../../flip.rs");
