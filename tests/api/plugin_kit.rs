//! Built plugin artifacts for the tests: `cargo plugins` (the documented build command) runs once per test
//! binary, into its own target folder beside this build's, and tests copy `.wasm` + manifest into a
//! server's plugins folder.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use herald_plugin_testkit::artifacts;

static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

fn repo_root() -> PathBuf {
    manifest_dir().parent().expect("repository root").to_path_buf()
}

/// The folder holding `herald_plugin_*.wasm` and `herald_fixture_*.wasm`, building them when needed (with
/// the SDK test kit's builder, which first adds the `wasm32-wasip2` target through rustup when the
/// toolchain lacks it, so the README's test command is all the set-up there is).
pub fn artifacts() -> &'static Path {
    let built = BUILT.get_or_init(|| {
        let target = std::env::var_os("HERALD_WASM_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("..").join("wasm-plugins"));
        artifacts::build(&repo_root(), &target, &["plugins"])
    });
    match built {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// A first-party plugin or fixture: its artifact stem, its manifest in the repository, its plugin name.
#[derive(Clone, Copy)]
pub struct Artifact {
    pub file: &'static str,
    pub manifest: &'static str,
    pub name: &'static str,
}

pub const OPERATORS: Artifact =
    Artifact { file: "herald_plugin_operators", manifest: "plugins/operators/manifest.toml", name: "operators" };
pub const WEBHOOK: Artifact =
    Artifact { file: "herald_plugin_webhook", manifest: "plugins/webhook/manifest.toml", name: "webhook" };
pub const UPDATE_CONTACT: Artifact = Artifact {
    file: "herald_plugin_update_contact",
    manifest: "plugins/update-contact/manifest.toml",
    name: "update-contact",
};
pub const HTTP: Artifact =
    Artifact { file: "herald_plugin_http", manifest: "plugins/http/manifest.toml", name: "http" };
pub const SES: Artifact = Artifact { file: "herald_plugin_ses", manifest: "plugins/ses/manifest.toml", name: "ses" };
pub const BAD_OPERATOR: Artifact = Artifact {
    file: "herald_fixture_misbehaving_operator",
    manifest: "plugins/fixtures/misbehaving-operator/manifest.toml",
    name: "misbehaving-operator",
};
pub const BAD_STEP: Artifact = Artifact {
    file: "herald_fixture_misbehaving_step",
    manifest: "plugins/fixtures/misbehaving-step/manifest.toml",
    name: "misbehaving-step",
};
pub const WRONG_ABI: Artifact = Artifact {
    file: "herald_fixture_wrong_abi",
    manifest: "plugins/fixtures/wrong-abi/manifest.toml",
    name: "wrong-abi",
};
pub const ABI_1_0: Artifact =
    Artifact { file: "herald_fixture_abi_1_0", manifest: "plugins/fixtures/abi-1-0/manifest.toml", name: "abi-1-0" };
pub const VERSION_A: Artifact = Artifact {
    file: "herald_fixture_version_a",
    manifest: "plugins/fixtures/version-a/manifest.toml",
    name: "versioned",
};
pub const VERSION_B: Artifact = Artifact {
    file: "herald_fixture_version_b",
    manifest: "plugins/fixtures/version-b/manifest.toml",
    name: "versioned",
};

/// The artifact's bytes.
pub fn wasm(a: Artifact) -> Vec<u8> {
    let p = artifacts().join(format!("{}.wasm", a.file));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Copies a plugin (manifest first, then the component) into a plugins folder as `<name>.wasm`.
pub fn install(dir: &Path, a: Artifact) {
    std::fs::create_dir_all(dir).expect("plugins dir");
    let manifest = std::fs::read(repo_root().join(a.manifest)).expect("manifest");
    std::fs::write(dir.join(format!("{}.toml", a.name)), manifest).expect("write manifest");
    std::fs::write(dir.join(format!("{}.wasm", a.name)), wasm(a)).expect("write wasm");
}

/// The package's folder, as cargo says when it runs the test (a test binary reused from another checkout
/// that shares the target directory still reads this checkout), else where it was built.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}
