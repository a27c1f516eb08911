//! The Python wheels, packed from what the workspace build made (no
//! second build, no maturin): `toolgate-cli`, the release binaries as the
//! wheel's scripts, so `pip install toolgate-cli` puts `toolgate` and
//! `toolgate-hook` on a virtualenv's (or the user's) `PATH` with no Rust
//! toolchain (the layout of maturin's `bindings = "bin"`); and `toolgate`,
//! the embedding package (its Python sources and the `_native` extension,
//! the layout maturin makes from host/python).
//!
//! The platform tag is the oldest the binaries run on: `manylinux_2_N` for
//! the newest glibc symbol version they need (PEP 600), `musllinux_1_2` for
//! a static musl build; a binary needing a shared library manylinux does
//! not allow (libpython above all) is refused.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail, ensure};
use base64::Engine as _;
use object::read::elf::ElfFile64;
use sha2::{Digest as _, Sha256};

use crate::dist::{BINARIES, Release};

/// The binaries' wheel's distribution name on PyPI.
const CLI_NAME: &str = "toolgate-cli";
/// The embedding package's distribution (and import) name.
const PYTHON_NAME: &str = "toolgate";

impl Release {
    /// The `toolgate-cli` wheel of the binaries in `bins` (built for
    /// `target`), in `out`.
    pub fn cli_wheel(&self, target: &str, bins: &Path) -> anyhow::Result<PathBuf> {
        let binaries: Vec<(&str, Vec<u8>)> = BINARIES
            .iter()
            .map(|bin| read(&bins.join(bin)).map(|bytes| (*bin, bytes)))
            .collect::<anyhow::Result<_>>()?;
        let tag = format!(
            "py3-none-{}",
            platform_tag(target, binaries.iter().map(|(_, b)| b.as_slice()))?
        );
        let stem = format!("{}-{}", CLI_NAME.replace('-', "_"), self.version);
        let files = binaries
            .into_iter()
            .map(|(bin, bytes)| (format!("{stem}.data/scripts/{bin}"), bytes, 0o755))
            .collect();
        let readme = std::fs::read_to_string(self.root.join("README.md"))?;
        let metadata = format!(
            "Metadata-Version: 2.1\n\
             Name: {CLI_NAME}\n\
             Version: {}\n\
             Summary: toolgate's `toolgate` and `toolgate-hook` binaries: ask sandboxed WebAssembly policies before an agent runs a tool.\n\
             License-Expression: Apache-2.0\n\
             Classifier: Environment :: Console\n\
             Classifier: Operating System :: POSIX :: Linux\n\
             Classifier: Programming Language :: Rust\n\
             Description-Content-Type: text/markdown\n\n\
             {readme}",
            self.version
        );
        self.wheel(&stem, &tag, files, metadata)
    }

    /// The embedding package's wheel (`toolgate`, abi3, for every Python
    /// from 3.9): its Python sources and `native`, the `toolgate-python`
    /// crate's library built for `target` (by the workspace's own build,
    /// so nothing compiles twice), its metadata read from
    /// host/python/pyproject.toml. What `maturin build` makes from the same
    /// files, which stays the way to build it from source.
    pub fn python_wheel(&self, target: &str, native: &Path) -> anyhow::Result<PathBuf> {
        let package = self.root.join("host/python");
        let library = read(native)?;
        let tag = format!(
            "cp39-abi3-{}",
            platform_tag(target, [library.as_slice()].into_iter())?
        );
        let stem = format!("{PYTHON_NAME}-{}", self.version);
        let mut files = vec![(format!("{PYTHON_NAME}/_native.abi3.so"), library, 0o755)];
        let sources = package.join("python").join(PYTHON_NAME);
        let mut names: Vec<_> = std::fs::read_dir(&sources)
            .with_context(|| format!("cannot read {}", sources.display()))?
            .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<_>>()?;
        names.retain(|n| !n.starts_with('.') && n != "__pycache__");
        names.sort();
        for name in names {
            files.push((
                format!("{PYTHON_NAME}/{name}"),
                read(&sources.join(&name))?,
                0o644,
            ));
        }
        let metadata = python_metadata(&package, &self.version)?;
        self.wheel(&stem, &tag, files, metadata)
    }

    /// A wheel `{stem}-{tag}.whl` in `out`: `files` (name, bytes, mode),
    /// then the dist-info (`metadata`, WHEEL and the RECORD of them all).
    fn wheel(
        &self,
        stem: &str,
        tag: &str,
        mut files: Vec<(String, Vec<u8>, u32)>,
        metadata: String,
    ) -> anyhow::Result<PathBuf> {
        for (name, bytes, _) in &files {
            if bytes.starts_with(b"\x7fELF") {
                check_libraries(name, bytes)?;
            }
        }
        files.push((
            format!("{stem}.dist-info/METADATA"),
            metadata.into_bytes(),
            0o644,
        ));
        files.push((
            format!("{stem}.dist-info/WHEEL"),
            format!(
                "Wheel-Version: 1.0\nGenerator: cargo xtask dist\nRoot-Is-Purelib: false\nTag: {tag}\n"
            )
            .into_bytes(),
            0o644,
        ));
        let record_name = format!("{stem}.dist-info/RECORD");
        let mut record = String::new();
        for (name, bytes, _) in &files {
            let digest =
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(bytes));
            record += &format!("{name},sha256={digest},{}\n", bytes.len());
        }
        record += &format!("{record_name},,\n");
        files.push((record_name, record.into_bytes(), 0o644));

        let path = self.out.join(format!("{stem}-{tag}.whl"));
        write_zip(&path, &files)?;
        Ok(path)
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Core metadata 2.1 of the embedding package, from its pyproject.toml's
/// `[project]` table (name, summary, readme, licence, Python versions,
/// classifiers and extras): what PyPI shows and pip resolves.
fn python_metadata(package: &Path, version: &str) -> anyhow::Result<String> {
    let path = package.join("pyproject.toml");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let pyproject: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
    let project = pyproject
        .get("project")
        .and_then(toml::Value::as_table)
        .with_context(|| format!("{} has no [project] table", path.display()))?;
    let field = |key: &str| {
        project
            .get(key)
            .and_then(toml::Value::as_str)
            .with_context(|| format!("{}: [project] has no `{key}`", path.display()))
    };
    ensure!(
        field("name")? == PYTHON_NAME,
        "{}: the package is `{PYTHON_NAME}`",
        path.display()
    );
    let mut text = format!(
        "Metadata-Version: 2.1\nName: {PYTHON_NAME}\nVersion: {version}\nSummary: {}\n\
         License-Expression: {}\nRequires-Python: {}\n",
        field("description")?,
        field("license")?,
        field("requires-python")?,
    );
    let strings = |value: &toml::Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    for classifier in project.get("classifiers").map(strings).unwrap_or_default() {
        text += &format!("Classifier: {classifier}\n");
    }
    let extras = project
        .get("optional-dependencies")
        .and_then(toml::Value::as_table);
    for (extra, requirements) in extras.into_iter().flatten() {
        text += &format!("Provides-Extra: {extra}\n");
        for requirement in strings(requirements) {
            text += &format!("Requires-Dist: {requirement} ; extra == \"{extra}\"\n");
        }
    }
    let readme = package.join(field("readme")?);
    text += "Description-Content-Type: text/markdown\n\n";
    text += &std::fs::read_to_string(&readme)
        .with_context(|| format!("cannot read {}", readme.display()))?;
    Ok(text)
}

/// The shared libraries a manylinux wheel may need (PEP 600): the C and
/// C++ runtimes, never the Python library (the interpreter provides its
/// symbols) nor anything else a user's machine may lack.
const MANYLINUX_LIBRARIES: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libutil.so.1",
    "libresolv.so.2",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

/// Refuse `binary` (the wheel's file `name`) if it needs a shared library
/// outside [`MANYLINUX_LIBRARIES`]: the check maturin and auditwheel make.
fn check_libraries(name: &str, binary: &[u8]) -> anyhow::Result<()> {
    let needed =
        needed_libraries(binary).with_context(|| format!("{name} is not a valid ELF file"))?;
    let foreign: Vec<&String> = needed
        .iter()
        .filter(|lib| !MANYLINUX_LIBRARIES.contains(&lib.as_str()))
        .collect();
    ensure!(
        foreign.is_empty(),
        "{name} needs {foreign:?}, which a manylinux wheel may not (a Python extension built \
         without PYO3_BUILD_EXTENSION_MODULE links libpython: see .cargo/config.toml)"
    );
    Ok(())
}

/// The `DT_NEEDED` entries of an ELF file (none for a static one).
fn needed_libraries(binary: &[u8]) -> anyhow::Result<Vec<String>> {
    let file = ElfFile64::<object::Endianness>::parse(binary)?;
    let table = file
        .elf_section_table()
        .dynamic_table(file.endian(), binary)?;
    table
        .iter()
        .filter(|entry| entry.tag == object::elf::DT_NEEDED)
        .map(|entry| Ok(String::from_utf8_lossy(table.string(entry)?).into_owned()))
        .collect()
}

/// The wheel platform tag of binaries built for `target`.
pub fn platform_tag<'a>(
    target: &str,
    binaries: impl Iterator<Item = &'a [u8]>,
) -> anyhow::Result<String> {
    let arch = target.split('-').next().unwrap_or("");
    if !matches!(arch, "x86_64" | "aarch64") || !target.contains("-linux-") {
        bail!("no wheel platform tag known for {target}");
    }
    if target.ends_with("-musl") {
        return Ok(format!("musllinux_1_2_{arch}"));
    }
    let newest = binaries
        .flat_map(glibc_versions)
        .max()
        .context("the binaries name no glibc symbol version: are they built for -linux-gnu?")?;
    // manylinux2014 (glibc 2.17) is the oldest a current pip installs.
    Ok(format!("manylinux_2_{}_{arch}", newest.max(17)))
}

/// The minor versions of the `GLIBC_2.N` symbol versions `binary` needs.
fn glibc_versions(binary: &[u8]) -> Vec<u32> {
    const MARK: &[u8] = b"GLIBC_2.";
    memchr::memmem::find_iter(binary, MARK)
        .filter_map(|at| {
            let digits: String = binary[at + MARK.len()..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|b| char::from(*b))
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// A zip of `files` (name, bytes, mode), in that order, every entry
/// dated 1980-01-01 (zip's first day): the same files make the same bytes.
fn write_zip(path: &Path, files: &[(String, Vec<u8>, u32)]) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut zip = zip::ZipWriter::new(file);
    for (name, bytes, mode) in files {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(*mode)
            .last_modified_time(zip::DateTime::default());
        zip.start_file(name.as_str(), options)?;
        zip.write_all(bytes)?;
    }
    zip.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test program: a dynamically linked ELF file needing libc.
    fn this_program() -> Vec<u8> {
        std::fs::read(std::env::current_exe().unwrap()).unwrap()
    }

    #[test]
    fn a_binary_needing_only_the_c_runtime_may_go_in_a_wheel() {
        let program = this_program();
        let needed = needed_libraries(&program).unwrap();
        assert!(needed.iter().any(|l| l == "libc.so.6"), "{needed:?}");
        check_libraries("bin", &program).unwrap();
    }

    #[test]
    fn a_binary_needing_libpython_is_refused() {
        // The same program with its libc dependency renamed (same length).
        let mut program = this_program();
        let (from, to) = (b"libc.so.6\0", b"libpython\0");
        let spots: Vec<usize> = memchr::memmem::find_iter(&program, from).collect();
        assert!(!spots.is_empty());
        for at in spots {
            program[at..at + to.len()].copy_from_slice(to);
        }
        let err = check_libraries("toolgate/_native.abi3.so", &program).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("\"libpython\"") && message.contains("PYO3_BUILD_EXTENSION_MODULE"),
            "{message}"
        );
    }

    #[test]
    fn the_embedding_package_metadata_comes_from_its_pyproject() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let text = python_metadata(&root.join("host/python"), "9.8.7").unwrap();
        for line in [
            "Name: toolgate\n",
            "Version: 9.8.7\n",
            "Requires-Python: >=3.9\n",
            "Provides-Extra: langgraph\n",
            "Requires-Dist: langgraph>=1.0 ; extra == \"langgraph\"\n",
            "Provides-Extra: openai-agents\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
        assert!(text.contains("\n\n# toolgate"), "the README follows");
    }
}
