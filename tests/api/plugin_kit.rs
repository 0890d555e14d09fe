//! Built plugin artifacts for the tests: `cargo plugins` (the documented build command) runs once per test
//! binary, into its own target folder beside this build's, and tests copy `.wasm` + manifest into a
//! server's plugins folder.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_path_buf()
}

/// The folder holding `herald_plugin_*.wasm` and `herald_fixture_*.wasm`, building them when needed.
pub fn artifacts() -> &'static Path {
    let built = BUILT.get_or_init(|| {
        let target = std::env::var_os("HERALD_WASM_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("..").join("wasm-plugins"));
        ensure_wasm_target()?;
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .arg("plugins")
            .current_dir(repo_root())
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .map_err(|e| format!("cannot run cargo plugins: {e}"))?;
        if !out.status.success() {
            return Err(format!("cargo plugins failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(target.join("wasm32-wasip2").join("release"))
    });
    match built {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// Adds the `wasm32-wasip2` target through rustup when the active toolchain lacks it (a fresh machine with
/// only rustup and cargo), so the README's test command is all the set-up there is. (The same check as the
/// plugin SDK's test kit, which this crate does not depend on.)
fn ensure_wasm_target() -> Result<(), String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out =
        Command::new(rustc).args(["--print", "sysroot"]).output().map_err(|e| format!("cannot run rustc: {e}"))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if sysroot.join("lib").join("rustlib").join("wasm32-wasip2").is_dir() {
        return Ok(());
    }
    let out = Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .output()
        .map_err(|e| format!("the wasm32-wasip2 target is missing and rustup cannot add it: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("rustup target add wasm32-wasip2 failed:\n{}", String::from_utf8_lossy(&out.stderr))),
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
