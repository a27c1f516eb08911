//! The guest components are built once, by `toolgate-engine`'s build script;
//! it hands their directory on (`links` metadata), and this passes it to the
//! integration tests and benches as `TOOLGATE_GUEST_DIR`, as the engine's
//! own tests see it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::env::var("DEP_TOOLGATE_GUESTS_GUEST_DIR")
        .expect("toolgate-engine's build script names the guests' directory");
    println!("cargo:rustc-env=TOOLGATE_GUEST_DIR={dir}");
}
