//! The "allow" version of the flip policy (see `flip.rs`).

const DENIES: bool = false;

include!("../../flip.rs");
