//! Building plugin components from a test: run Cargo for `wasm32-wasip2` into a target folder of its
//! own (so the outer `cargo test` does not wait for its own build lock) and find the `.wasm` files.
//!
//! ```no_run
//! use std::path::Path;
//! use std::sync::OnceLock;
//!
//! fn my_plugin() -> &'static Path {
//!     static BUILT: OnceLock<std::path::PathBuf> = OnceLock::new();
//!     BUILT.get_or_init(|| {
//!         let root = Path::new(env!("CARGO_MANIFEST_DIR"));
//!         let target = root.join("target").join("plugin-wasm");
//!         herald_plugin_testkit::artifacts::build_package(root, &target, "my-plugin").expect("build")
//!     })
//! }
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Cargo to run: `$CARGO` (set by Cargo for tests and build scripts), else `cargo`.
pub fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Where components land: `<target_dir>/wasm32-wasip2/release`.
pub fn release_dir(target_dir: &Path) -> PathBuf {
    target_dir.join("wasm32-wasip2").join("release")
}

/// The component file Cargo writes for a package (`my-plugin` → `my_plugin.wasm`).
pub fn wasm_file_name(package: &str) -> String {
    format!("{}.wasm", package.replace('-', "_"))
}

/// Makes sure the active toolchain can build for `wasm32-wasip2`: when its standard library for that
/// target is missing (a machine with only rustup and cargo), runs `rustup target add wasm32-wasip2`, so
/// `cargo test` is all the set-up a plugin's tests need.
pub fn ensure_wasm_target() -> Result<(), String> {
    // Tests call this in parallel: one check (and install) at a time.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("cannot run rustc --print sysroot: {e}"))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if sysroot.join("lib").join("rustlib").join("wasm32-wasip2").is_dir() {
        return Ok(());
    }
    let out = Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .output()
        .map_err(|e| format!("the wasm32-wasip2 target is missing and rustup cannot add it: {e}"))?;
    if !out.status.success() {
        return Err(format!("rustup target add wasm32-wasip2 failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// Runs `cargo <args>` in `root` with `CARGO_TARGET_DIR=<target_dir>` (e.g. `["plugins"]` for Herald's
/// alias, or a `build --release --target wasm32-wasip2 ...` of your own), after
/// [`ensure_wasm_target`], and returns [`release_dir`]. The error carries Cargo's output.
pub fn build(root: &Path, target_dir: &Path, args: &[&str]) -> Result<PathBuf, String> {
    ensure_wasm_target()?;
    let out = Command::new(cargo())
        .args(args)
        .current_dir(root)
        .env("CARGO_TARGET_DIR", target_dir)
        .output()
        .map_err(|e| format!("cannot run cargo {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!("cargo {} failed:\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(release_dir(target_dir))
}

/// Builds one package as a component (`cargo build --release --target wasm32-wasip2 -p <package>`)
/// and returns its `.wasm` file.
pub fn build_package(root: &Path, target_dir: &Path, package: &str) -> Result<PathBuf, String> {
    let dir = build(root, target_dir, &["build", "--release", "--target", "wasm32-wasip2", "-p", package])?;
    let wasm = dir.join(wasm_file_name(package));
    if wasm.exists() { Ok(wasm) } else { Err(format!("cargo built no {}", wasm.display())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(wasm_file_name("herald-plugin-http"), "herald_plugin_http.wasm");
        assert_eq!(release_dir(Path::new("/t")), Path::new("/t/wasm32-wasip2/release"));
    }
}
