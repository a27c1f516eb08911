//! Reads the rule packs (`packs/*.toml`, written for people) and hands them
//! to the policy as one JSON document (`$OUT_DIR/packs.json`): a pack that
//! does not parse fails the build, naming the file.

use std::fs;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("packs");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let mut packs = serde_json::Map::new();
    for file in files {
        println!("cargo:rerun-if-changed={}", file.display());
        let text = fs::read_to_string(&file).unwrap();
        let table: toml::Table = toml::from_str(&text)
            .unwrap_or_else(|err| panic!("{}: not a valid pack: {err}", file.display()));
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        packs.insert(name, serde_json::to_value(table).unwrap());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("packs.json");
    fs::write(out, serde_json::Value::Object(packs).to_string()).unwrap();
}
