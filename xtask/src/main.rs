//! `cargo xtask`: toolgate's release packaging.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use xtask::dist::{self, Release};

/// toolgate's release packaging (`cargo xtask dist --help`).
#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build the release artifacts: for each target a tarball of `toolgate`
    /// and `toolgate-hook`, its CycloneDX SBOM, the `toolgate-cli` Python
    /// wheel of the binaries and, for -linux-gnu, a Debian package, the
    /// embedding package's abi3 wheel and the Node addon's platform
    /// package; then the main npm package naming those, SHA256SUMS over
    /// everything and, with --sign-key, SHA256SUMS.sig.
    ///
    /// Targets: x86_64-unknown-linux-gnu (default: this machine's),
    /// x86_64-unknown-linux-musl (`rustup target add` it and install
    /// musl-tools), aarch64-unknown-linux-gnu where a cross linker is set
    /// up. People verify with `toolgate release verify --key KEY FILE…`.
    Dist {
        /// A target triple; repeat for more.
        #[arg(long = "target", value_name = "TRIPLE")]
        targets: Vec<String>,
        /// Where the artifacts go (default: target/dist in the workspace).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// The release's secret key (`toolgate release keygen`).
        #[arg(long, value_name = "KEY")]
        sign_key: Option<PathBuf>,
        /// Package binaries already built here (for the one target given)
        /// instead of building them.
        #[arg(long, value_name = "DIR")]
        bins_from: Option<PathBuf>,
        /// Skip the binaries' size budget (for debug builds).
        #[arg(long)]
        no_size_budget: bool,
        /// Make no Debian package (it needs `dpkg-deb`).
        #[arg(long)]
        no_deb: bool,
        /// Make no wheel of the Python embedding package.
        #[arg(long)]
        no_python: bool,
        /// Make no npm packages (they need `npm`).
        #[arg(long)]
        no_node: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let Cli { command } = Cli::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf();
    match command {
        Task::Dist {
            mut targets,
            out,
            sign_key,
            bins_from,
            no_size_budget,
            no_deb,
            no_python,
            no_node,
        } => {
            if targets.is_empty() {
                targets.push(dist::host_target()?);
            }
            anyhow::ensure!(
                bins_from.is_none() || targets.len() == 1,
                "--bins-from packages one target's binaries: give one --target"
            );
            let out = out.unwrap_or_else(|| root.join("target/dist"));
            let release = Release::new(&root, &std::path::absolute(out)?)?;
            let mut signer = None;
            let mut platforms = Vec::new();
            for target in &targets {
                let bins = match &bins_from {
                    Some(dir) => dir.clone(),
                    None => release.build(target)?,
                };
                let mut artifacts = release.package(target, &bins, !no_size_budget)?;
                artifacts.push(release.cli_wheel(target, &bins)?);
                if target.ends_with("-linux-gnu") {
                    if !no_deb {
                        artifacts.push(release.deb(target, &bins)?);
                    }
                    if !no_python {
                        let native =
                            release.cargo_build(target, &["--package", "toolgate-python"])?;
                        artifacts
                            .push(release.python_wheel(target, &native.join("lib_native.so"))?);
                    }
                    if !no_node {
                        let addon = release.build_addon(target)?;
                        artifacts.push(release.npm_platform_package(target, &addon)?);
                        platforms.push(xtask::npm::platform(target)?.0);
                    }
                }
                for artifact in artifacts {
                    println!("{}", artifact.display());
                }
                signer.get_or_insert(bins.join("toolgate"));
            }
            if !platforms.is_empty() {
                println!("{}", release.npm_package(&platforms)?.display());
            }
            let sums = release.seal(&signer.expect("one target at least"), sign_key.as_deref())?;
            println!("{}", sums.display());
            Ok(())
        }
    }
}
