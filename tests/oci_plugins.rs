//! Plugins from an OCI registry, against a real one (Debian's
//! `docker-registry`, the CNCF distribution registry) on loopback: push and
//! pull by tag and by digest, in the wasm artifact layout other tools read;
//! what does not match its digest or signature is refused; a host whose
//! registry is down starts from its verified cache; credentials never reach
//! the output.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::oci_registry::Registry;
use common::pg_cluster::Cluster;
use common::{call, guest};
use serde_json::json;
use toolgate::{Config, Service, Verdict};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn toolgate(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("TOOLGATE_REGISTRY_USERNAME");
    command.env_remove("TOOLGATE_REGISTRY_PASSWORD");
    command.env_remove("TOOLGATE_REGISTRY_HOST");
    // No Docker config of the machine's own leaks into a test.
    command.env("DOCKER_CONFIG", "/nonexistent-docker-config");
    command.envs(envs.iter().copied()).output().unwrap()
}

use crate::common::output_text as text;

/// A test's directory: the plugin files, its keys, its config and store.
struct Scene {
    dir: tempfile::TempDir,
    public_key: String,
}

impl Scene {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ops");
        let out = toolgate(
            &["plugins", "keygen", "--out", prefix.to_str().unwrap()],
            &[],
        );
        assert!(out.status.success(), "{out:?}");
        let public_key = String::from_utf8(out.stdout).unwrap().trim().to_string();
        Self { dir, public_key }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A copy of a test policy, signed by this scene's key unless
    /// `signed` is false.
    fn plugin(&self, package: &str, signed: bool) -> PathBuf {
        let file = self.path(&format!("{package}.wasm"));
        std::fs::copy(guest(package), &file).unwrap();
        if signed {
            let key = self.path("ops.key");
            let out = toolgate(
                &[
                    "plugins",
                    "sign",
                    "--key",
                    key.to_str().unwrap(),
                    file.to_str().unwrap(),
                ],
                &[],
            );
            assert!(out.status.success(), "{out:?}");
        }
        file
    }

    /// A host whose one plugin is `path`, with `extra` lines in its table.
    fn open(&self, path: &str, extra: &str) -> toolgate::Result<Service> {
        let text = common::config_text(&format!(
            "require_signatures = true\ntrusted_keys = [\"{}\"]\n[plugins.remote]\npath = {path:?}\n{extra}\n",
            self.public_key
        ));
        let config = self.path("toolgate.toml");
        std::fs::write(&config, text).unwrap();
        Service::open(
            Config::load(&config)?,
            Some(self.path("toolgate.redb").into()),
        )
    }

    /// The cache of pulled plugins beside this scene's store.
    fn pulled_dir(&self) -> PathBuf {
        self.path("toolgate.redb.oci")
    }
}

/// `toolgate plugins push FILE REFERENCE`: the pinned reference it prints.
fn push(file: &Path, reference: &str, envs: &[(&str, &str)]) -> String {
    let out = toolgate(
        &["plugins", "push", file.to_str().unwrap(), reference],
        envs,
    );
    assert!(out.status.success(), "push failed: {}", text(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn digest_of(pinned: &str) -> &str {
    pinned.rsplit_once('@').unwrap().1
}

fn verdict(host: &Service) -> Verdict {
    host.evaluate(&call("Read", json!({"file_path": "/tmp/x"})))
        .unwrap()
        .verdict
}

fn refusal(result: toolgate::Result<Service>) -> String {
    result.expect_err("the plugin must be refused").to_string()
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

#[test]
fn a_pushed_plugin_loads_by_digest_with_its_signature_in_the_wasm_artifact_layout() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let scene = Scene::new();
    let file = scene.plugin("flip-allow-policy", true);
    let pinned = push(
        &file,
        &format!("{}:1.0", registry.reference("policies/allow")),
        &[],
    );
    assert!(
        pinned.starts_with(&format!(
            "{}:1.0@sha256:",
            registry.reference("policies/allow")
        )),
        "{pinned}"
    );

    // The layout other wasm tools read: an OCI image manifest, the wasm
    // config, one application/wasm layer holding the file unchanged, and
    // the signature file as an annotation.
    let manifest = registry.manifest(digest_of(&pinned));
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(layers[0]["digest"], sha256(&bytes));
    let signature = std::fs::read_to_string(scene.path("flip-allow-policy.wasm.sig")).unwrap();
    assert_eq!(
        manifest["annotations"][toolgate::oci::SIGNATURE_ANNOTATION],
        toolgate::oci::encode_signature(&signature)
    );
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(registry.blob_file(manifest["config"]["digest"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (config["architecture"].as_str(), config["os"].as_str()),
        (Some("wasm"), Some("wasip2"))
    );
    let exports: Vec<&str> = config["component"]["exports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert!(
        exports
            .iter()
            .any(|e| e.starts_with("toolgate:policy/gate@")),
        "{config}"
    );

    let host = scene
        .open(&pinned, "")
        .expect("a pinned, signed plugin loads");
    assert_eq!(verdict(&host), Verdict::Allow);
    let status = &host.plugin_statuses()[0];
    assert_eq!(status.source, pinned);
    assert_eq!(
        status.origin.as_deref(),
        Some(format!("{pinned} (pulled)").as_str())
    );
    drop(host);

    // `plugins pull`, by tag and by digest: the same bytes and signature.
    for reference in [
        format!("{}:1.0", registry.reference("policies/allow")),
        pinned.clone(),
    ] {
        let out_file = scene.path("pulled.wasm");
        let store = scene.path("cli.redb");
        let out = toolgate(
            &[
                "--store",
                store.to_str().unwrap(),
                "plugins",
                "pull",
                &reference,
                "--out",
                out_file.to_str().unwrap(),
            ],
            &[],
        );
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pinned);
        assert_eq!(std::fs::read(&out_file).unwrap(), bytes);
        assert_eq!(
            std::fs::read_to_string(scene.path("pulled.wasm.sig")).unwrap(),
            signature
        );
    }
}

#[test]
fn a_tag_without_a_digest_loads_only_when_the_operator_opts_out_of_pinning() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let scene = Scene::new();
    let tag = format!("{}:live", registry.reference("policies/flip"));
    let first = push(&scene.plugin("flip-allow-policy", true), &tag, &[]);

    let unpinned = refusal(scene.open(&tag, ""));
    assert!(
        unpinned.contains("without a digest") && unpinned.contains("allow_unpinned"),
        "{unpinned}"
    );

    let host = scene.open(&tag, "allow_unpinned = true").unwrap();
    assert_eq!(verdict(&host), Verdict::Allow);
    assert_eq!(
        host.plugin_statuses()[0].origin.as_deref(),
        Some(format!("{first} (pulled)").as_str())
    );

    // The tag moves; a reload follows it.
    let second = push(&scene.plugin("flip-deny-policy", true), &tag, &[]);
    let report = host.reload().unwrap();
    assert_eq!(report.loaded, ["remote"], "{report:?}");
    assert_eq!(verdict(&host), Verdict::Deny);
    assert_eq!(
        host.plugin_statuses()[0].origin.as_deref(),
        Some(format!("{second} (pulled)").as_str())
    );
}

#[test]
fn content_that_does_not_match_its_digest_is_refused() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let scene = Scene::new();
    let allow = push(
        &scene.plugin("flip-allow-policy", true),
        &format!("{}:a", registry.reference("policies/t")),
        &[],
    );
    let deny = push(
        &scene.plugin("flip-deny-policy", true),
        &format!("{}:b", registry.reference("policies/t")),
        &[],
    );

    // A pin to a digest the registry does not have.
    let absent = format!(
        "{}:a@sha256:{}",
        registry.reference("policies/t"),
        "0".repeat(64)
    );
    let missing = refusal(scene.open(&absent, ""));
    assert!(
        missing.contains("manifest unknown") && !missing.contains("from the verified cache"),
        "{missing}"
    );

    // The registry serves the deny manifest under the allow digest.
    let allow_manifest = registry.blob_file(digest_of(&allow));
    let original = std::fs::read(&allow_manifest).unwrap();
    std::fs::copy(registry.blob_file(digest_of(&deny)), &allow_manifest).unwrap();
    let swapped = refusal(scene.open(&allow, ""));
    assert!(
        swapped.contains("the manifest the registry served does not match its digest")
            && swapped.contains("refusing"),
        "{swapped}"
    );
    std::fs::write(&allow_manifest, original).unwrap();

    // One flipped byte in the component the registry serves.
    let layer = registry.manifest(digest_of(&allow))["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let layer_file = registry.blob_file(&layer);
    let mut bytes = std::fs::read(&layer_file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&layer_file, &bytes).unwrap();
    let tampered = refusal(scene.open(&allow, ""));
    assert!(
        tampered.contains("component the registry served does not match")
            && tampered.contains("refusing"),
        "{tampered}"
    );
    let cached = std::fs::read_dir(scene.pulled_dir().join("blobs/sha256"))
        .map(|entries| entries.count())
        .unwrap_or(0);
    assert_eq!(cached, 0, "nothing refused is cached");
}

#[test]
fn under_require_signatures_an_artifact_must_carry_a_trusted_signature() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let scene = Scene::new();
    let unsigned = push(
        &scene.plugin("flip-allow-policy", false),
        &format!("{}:unsigned", registry.reference("policies/s")),
        &[],
    );
    let refused = refusal(scene.open(&unsigned, ""));
    assert!(
        refused.contains("must be signed")
            && refused.contains(toolgate::oci::SIGNATURE_ANNOTATION)
            && refused.contains("push it again"),
        "{refused}"
    );

    // Signed, but by a key this host does not trust.
    let stranger = Scene::new();
    let strangers = push(
        &stranger.plugin("flip-allow-policy", true),
        &format!("{}:stranger", registry.reference("policies/s")),
        &[],
    );
    let untrusted = refusal(scene.open(&strangers, ""));
    assert!(untrusted.contains("not in trusted_keys"), "{untrusted}");

    // `push` refuses a signature file that does not sign the file.
    let file = scene.plugin("flip-deny-policy", false);
    let other_sig = stranger.path("flip-allow-policy.wasm.sig");
    let out = toolgate(
        &[
            "plugins",
            "push",
            file.to_str().unwrap(),
            &format!("{}:mismatch", registry.reference("policies/s")),
            "--signature",
            other_sig.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("does not sign"), "{}", text(&out));
}

#[test]
fn with_the_registry_down_a_host_starts_from_its_verified_cache() {
    let Some(mut registry) = Registry::start() else {
        return;
    };
    let scene = Scene::new();
    let tag = format!("{}:stable", registry.reference("policies/c"));
    let pinned = push(&scene.plugin("flip-allow-policy", true), &tag, &[]);
    drop(
        scene
            .open(&tag, "allow_unpinned = true")
            .expect("pulled while the registry is up"),
    );
    registry.stop();

    // A pinned reference that was pulled needs no registry at all.
    let host = scene.open(&pinned, "").expect("starts from the cache");
    assert_eq!(verdict(&host), Verdict::Allow);
    assert!(
        host.plugin_statuses()[0]
            .origin
            .as_deref()
            .is_some_and(|o| o.starts_with(&pinned) && o.contains("from the verified cache")),
        "{:?}",
        host.plugin_statuses()[0].origin
    );
    drop(host);

    // A tag falls back to the digest it named when last pulled, and says why.
    let host = scene
        .open(&tag, "allow_unpinned = true")
        .expect("starts from the cache");
    let origin = host.plugin_statuses()[0].origin.clone().unwrap();
    assert!(
        origin.starts_with(&pinned) && origin.contains("the registry is unreachable"),
        "{origin}"
    );
    drop(host);

    // A cached component that was edited is no plugin.
    let layer = std::fs::read_dir(scene.pulled_dir().join("blobs/sha256"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::metadata(p).unwrap().len() > 100_000)
        .expect("the component is cached");
    let mut bytes = std::fs::read(&layer).unwrap();
    bytes[10] ^= 1;
    std::fs::write(&layer, &bytes).unwrap();
    let refused = refusal(scene.open(&pinned, ""));
    assert!(
        refused.contains("refused or failed") && refused.contains("nothing for"),
        "{refused}"
    );
    assert!(!layer.exists(), "the edited cache file is removed");
}

#[test]
fn a_registry_that_answers_is_believed_over_the_cache() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let scene = Scene::new();
    let tag = format!("{}:withdrawn", registry.reference("policies/w"));
    let pinned = push(&scene.plugin("flip-allow-policy", true), &tag, &[]);
    drop(
        scene
            .open(&tag, "allow_unpinned = true")
            .expect("pulled while the tag exists"),
    );

    // The operator withdraws the version: the registry now says the tag
    // names nothing, and the host believes it rather than its cache.
    let url = format!(
        "http://{}/v2/policies/w/manifests/{}",
        registry.address,
        digest_of(&pinned)
    );
    let deleted = ureq::delete(&url).call().unwrap();
    assert_eq!(deleted.status(), 202);
    let refused = refusal(scene.open(&tag, "allow_unpinned = true"));
    assert!(
        refused.contains("manifest unknown") && !refused.contains("from the verified cache"),
        "{refused}"
    );
}

#[test]
fn registry_credentials_come_from_the_usual_places_and_never_reach_the_output() {
    const PASSWORD: &str = "tg-registry-s3cret-7781";
    let Some(registry) = Registry::start_with_login("ops", PASSWORD) else {
        return;
    };
    let scene = Scene::new();
    let file = scene.plugin("flip-allow-policy", true);
    let tag = format!("{}:1", registry.reference("policies/private"));
    let debug = ("TOOLGATE_LOG", "trace");

    let anonymous = toolgate(&["plugins", "push", file.to_str().unwrap(), &tag], &[debug]);
    assert!(!anonymous.status.success());
    assert!(
        text(&anonymous).contains("refused or failed"),
        "{}",
        text(&anonymous)
    );

    use base64::Engine as _;
    let basic = |password: &str| {
        base64::engine::general_purpose::STANDARD.encode(format!("ops:{password}"))
    };
    let address = registry.address.clone();
    let login = |password: &'static str, host: &str| -> Vec<(&'static str, String)> {
        vec![
            ("TOOLGATE_LOG", "trace".into()),
            ("TOOLGATE_REGISTRY_USERNAME", "ops".into()),
            ("TOOLGATE_REGISTRY_PASSWORD", password.into()),
            ("TOOLGATE_REGISTRY_HOST", host.into()),
        ]
    };
    let push_with = |envs: &[(&'static str, String)]| {
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        toolgate(&["plugins", "push", file.to_str().unwrap(), &tag], &envs)
    };

    let wrong = push_with(&login("wrong-pass-5512", &address));
    assert!(!wrong.status.success());
    let said = text(&wrong);
    assert!(
        said.contains("401") || said.contains("nauthorized"),
        "{said}"
    );
    assert!(
        !said.contains("wrong-pass-5512") && !said.contains(&basic("wrong-pass-5512")),
        "{said}"
    );

    // Credentials named for another registry are not sent to this one, and
    // credentials named for none are refused, saying why.
    let elsewhere = push_with(&login(PASSWORD, "registry.example:5000"));
    assert!(!elsewhere.status.success(), "{}", text(&elsewhere));
    assert!(text(&elsewhere).contains("401") || text(&elsewhere).contains("nauthorized"));
    let hostless = push_with(&login(PASSWORD, &address)[..3]);
    assert!(
        text(&hostless).contains("TOOLGATE_REGISTRY_HOST is not"),
        "{}",
        text(&hostless)
    );

    let pushed = push_with(&login(PASSWORD, &address));
    assert!(pushed.status.success(), "{}", text(&pushed));
    let said = text(&pushed);
    assert!(
        !said.contains(PASSWORD) && !said.contains(&basic(PASSWORD)),
        "{said}"
    );
    let pinned = String::from_utf8(pushed.stdout).unwrap().trim().to_string();

    // A Docker config file's `auths`, as `docker login` writes it.
    let docker = scene.path("docker");
    std::fs::create_dir(&docker).unwrap();
    let auth = basic(PASSWORD);
    std::fs::write(
        docker.join("config.json"),
        json!({"auths": {registry.address.clone(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let store = scene.path("cli.redb");
    let pulled = toolgate(
        &[
            "--store",
            store.to_str().unwrap(),
            "plugins",
            "pull",
            &pinned,
        ],
        &[debug, ("DOCKER_CONFIG", docker.to_str().unwrap())],
    );
    assert!(pulled.status.success(), "{}", text(&pulled));
    assert!(!text(&pulled).contains(PASSWORD), "{}", text(&pulled));
    assert!(!text(&pulled).contains(&auth), "{}", text(&pulled));
}

/// oras-py, a general OCI artifact client: pull what toolgate pushed, or
/// push a component in the wasm layout for toolgate to load.
const ORAS: &str = r#"
import sys, oras.client
address, op = sys.argv[1], sys.argv[2]
client = oras.client.OrasClient(hostname=address, insecure=True)
if op == "pull":
    for path in client.pull(target=sys.argv[3], outdir=sys.argv[4]):
        print(path)
else:
    target, wasm, config, signature = sys.argv[3:7]
    answer = client.push(
        target=target,
        files=[wasm + ":application/wasm"],
        manifest_config=config + ":application/vnd.wasm.config.v0+json",
        manifest_annotations={"dev.toolgate.signature.v1": open(signature).read()},
        disable_path_validation=True,
    )
    assert answer.status_code == 201, answer.text
"#;

#[test]
fn another_oci_client_reads_what_toolgate_pushes_and_toolgate_loads_what_it_pushes() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let Some(python) = common::python::python() else {
        return;
    };
    let oras = |args: &[&str]| {
        let out = Command::new(&python)
            .args(["-c", ORAS, &registry.address])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "oras-py: {}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let scene = Scene::new();
    let file = scene.plugin("flip-allow-policy", true);
    let bytes = std::fs::read(&file).unwrap();

    let pinned = push(
        &file,
        &format!("{}:1", registry.reference("interop/by-toolgate")),
        &[],
    );
    let outdir = scene.path("oras-out");
    let target = pinned.trim_start_matches("oci://").replace(":1@", "@");
    let pulled = oras(&["pull", &target, outdir.to_str().unwrap()]);
    let files: Vec<&str> = pulled.lines().collect();
    assert_eq!(files.len(), 1, "{pulled}");
    assert_eq!(
        std::fs::read(files[0]).unwrap(),
        bytes,
        "oras-py gets the component unchanged"
    );

    // oras-py pushes the wasm layout with the signature annotation.
    let config = scene.path("wasm-config.json");
    std::fs::write(
        &config,
        json!({"architecture": "wasm", "os": "wasip2"}).to_string(),
    )
    .unwrap();
    let signature = scene.path("signature.b64");
    let signature_file = std::fs::read_to_string(scene.path("flip-allow-policy.wasm.sig")).unwrap();
    std::fs::write(&signature, toolgate::oci::encode_signature(&signature_file)).unwrap();
    let tag = format!("{}:1", registry.reference("interop/by-oras"));
    oras(&[
        "push",
        tag.trim_start_matches("oci://"),
        file.to_str().unwrap(),
        config.to_str().unwrap(),
        signature.to_str().unwrap(),
    ]);
    let host = scene
        .open(&tag, "allow_unpinned = true")
        .expect("toolgate loads, signature checked, what oras-py pushed");
    assert_eq!(verdict(&host), Verdict::Allow);
}

#[test]
fn a_fleet_reload_makes_every_host_run_the_digest_the_reloading_host_resolved() {
    let Some(cluster) = Cluster::start("a_fleet_reload_makes_every_host_run_the_digest") else {
        return;
    };
    let Some(registry) = Registry::start() else {
        return;
    };
    let scene = Scene::new();
    let tag = format!("{}:live", registry.reference("policies/fleet"));
    push(&scene.plugin("flip-allow-policy", true), &tag, &[]);

    // Two hosts of one fleet, each with its own config file and cache.
    let url = cluster.database();
    let hosts: Vec<(Service, tempfile::TempDir)> = (0..2)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            let config = dir.path().join("toolgate.toml");
            std::fs::write(
                &config,
                common::config_text(&format!(
                    "oci_dir = \"pulled\"\n[plugins.remote]\npath = {tag:?}\nallow_unpinned = true\n"
                )),
            )
            .unwrap();
            let host = Service::open(Config::load(&config).unwrap(), Some(url.clone().into()));
            (host.expect("a fleet host starts"), dir)
        })
        .collect();
    assert!(
        hosts
            .iter()
            .all(|(host, _)| verdict(host) == Verdict::Allow)
    );

    // A new version under the tag; one host reloads and resolves it.
    let resolved = push(&scene.plugin("flip-deny-policy", true), &tag, &[]);
    hosts[0].0.reload().unwrap();
    assert_eq!(verdict(&hosts[0].0), Verdict::Deny);

    // The tag moves on before the other host hears of the reload: it still
    // loads the digest the reloading host resolved, not the tag's newest.
    let newest = push(&scene.plugin("scripted-policy", false), &tag, &[]);
    assert_ne!(newest, resolved);
    common::eventually("the other host to follow the fleet's digest", || {
        verdict(&hosts[1].0) == Verdict::Deny
    });
    let origin = hosts[1].0.plugin_statuses()[0].origin.clone().unwrap();
    assert!(origin.starts_with(&resolved), "{origin} is not {resolved}");
}
