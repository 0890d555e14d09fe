//! Configurations for tests: a scratch folder per test process and an in-memory set-up.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::{Config, Settings, SmtpSettings};

impl Config {
    /// Where this test process keeps its directories: `<temp>/herald-tests/<pid>`. The first call removes
    /// the directories of test processes that are no longer running (where `/proc` tells), so test runs
    /// do not pile directories up in the temp directory.
    pub fn test_scratch() -> PathBuf {
        static SCRATCH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        SCRATCH
            .get_or_init(|| {
                let root = std::env::temp_dir().join("herald-tests");
                if std::path::Path::new("/proc/self").exists() {
                    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                        let name = entry.file_name();
                        let dead = name
                            .to_str()
                            .and_then(|n| n.parse::<u32>().ok())
                            .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
                        if dead {
                            let _ = std::fs::remove_dir_all(entry.path());
                        }
                    }
                }
                root.join(std::process::id().to_string())
            })
            .clone()
    }

    /// A configuration for tests: in-memory database, an ephemeral port, fixed secret.
    pub fn for_tests() -> Config {
        Settings {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            db: Some("mem://".into()),
            secret: Some("test-secret-test-secret".into()),
            job_poll_ms: Some(20),
            campaign_progress_ms: Some(100),
            // No lookup leaves the machine: a port nothing answers on (tests that need DNS start a
            // server on loopback and name it).
            dns_servers: Some("127.0.0.1:1".into()),
            dns_timeout_ms: Some(100),
            plugins_dir: Some(Self::test_scratch().join(format!("plugins-{}", uuid::Uuid::new_v4()))),
            plugin_cache_dir: Some(std::env::temp_dir().join("herald-test-plugin-cache")),
            uploads_dir: Some(Self::test_scratch().join(format!("uploads-{}", uuid::Uuid::new_v4()))),
            mail_dir: Some(Self::test_scratch().join(format!("mail-{}", uuid::Uuid::new_v4()))),
            smtp: SmtpSettings {
                smtp_spool_dir: Some(Self::test_scratch().join(format!("spool-{}", uuid::Uuid::new_v4()))),
                ..Default::default()
            },
            ..Default::default()
        }
        .resolve()
        .unwrap_or_else(|e| panic!("test config: {e}"))
    }
}
