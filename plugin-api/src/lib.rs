//! Herald plugin ABI. The WIT package lives in `wit/<version>/herald.wit`, one folder per released version.
//!
//! A released version never changes: plugins built against it must keep loading on every later Herald of
//! the same major version. A change is a new version folder (a minor version only adds interfaces; a
//! major version may change anything and gets its own bindings module in the plugin runtime). The test
//! below pins each released file to its SHA-256 digest, so editing one fails the build's tests.

/// The released `herald:plugin` versions, oldest first, with the SHA-256 digest of their WIT text (line
/// endings normalised to `\n`). Add a line when a new version is released; never edit one.
pub const RELEASED: &[(&str, &str)] = &[
    ("1.0.0", "66d691961468170824c6947675b5cd7830256fe45549cd2dac2c238a329cfbea"),
    ("1.1.0", "b289f60fdb2edba4120669f99fad19907bf0a576e43a206d0d1e130955c04e96"),
];

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::RELEASED;

    /// The package's folder, as cargo says when it runs the test (a test binary reused from another checkout
    /// that shares the target directory still reads this checkout), else where it was built.
    fn manifest_dir() -> std::path::PathBuf {
        std::env::var_os("CARGO_MANIFEST_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
    }

    fn digest(text: &str) -> String {
        hex::encode(Sha256::digest(text.replace("\r\n", "\n").as_bytes()))
    }

    #[test]
    fn released_wit_files_never_change() {
        let wit = manifest_dir().join("wit");
        for (version, expected) in RELEASED {
            let path = wit.join(version).join("herald.wit");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                text.contains(&format!("package herald:plugin@{version};")),
                "{} names another version",
                path.display()
            );
            assert_eq!(
                &digest(&text),
                expected,
                "plugin-api/wit/{version}/herald.wit changed after its release: put the change in a new version folder"
            );
        }
        // The check notices a one-character edit.
        let path = wit.join(RELEASED[0].0).join("herald.wit");
        let edited = std::fs::read_to_string(path).expect("read").replacen("func(", "func (", 1);
        assert_ne!(digest(&edited), RELEASED[0].1);
    }

    #[test]
    fn every_version_folder_is_released() {
        let wit = manifest_dir().join("wit");
        let mut folders: Vec<String> = std::fs::read_dir(&wit)
            .expect("read wit/")
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        folders.sort();
        let released: Vec<&str> = RELEASED.iter().map(|(v, _)| *v).collect();
        assert_eq!(folders, released, "a WIT version folder without a digest in RELEASED (or the reverse)");
    }
}
