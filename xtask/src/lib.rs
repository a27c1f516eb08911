//! toolgate's release packaging, as `cargo xtask …` runs it and as the
//! test suite checks it (the same functions, on the binaries under test).

pub mod deb;
pub mod dist;
pub mod npm;
pub mod sbom;
pub mod wheel;
