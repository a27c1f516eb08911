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
    /// and `toolgate-hook`, its CycloneDX SBOM and (for -linux-gnu) a
    /// Debian package; then SHA256SUMS over them and, with --sign-key,
    /// SHA256SUMS.sig.
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
            for target in &targets {
                let bins = match &bins_from {
                    Some(dir) => dir.clone(),
                    None => release.build(target)?,
                };
                let mut artifacts = release.package(target, &bins, !no_size_budget)?;
                if !no_deb && target.ends_with("-linux-gnu") {
                    artifacts.push(release.deb(target, &bins)?);
                }
                for artifact in artifacts {
                    println!("{}", artifact.display());
                }
                signer.get_or_insert(bins.join("toolgate"));
            }
            let sums = release.seal(&signer.expect("one target at least"), sign_key.as_deref())?;
            println!("{}", sums.display());
            Ok(())
        }
    }
}
