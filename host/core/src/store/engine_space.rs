//! The storage engine under the embedded default gives deleted space back to the file system by itself.
//!
//! SurrealKV 0.21.4 kept it: a deletion waited in the memtable until enough other writes filled it,
//! leveled compaction never brought tombstones down to the data they deleted once that data lay in a
//! level their few bytes never pushed over its size, and a value-log file stayed while any table, or any
//! older file, held one live value. Herald builds SurrealKV with a tidy task, deletion merges and value-log
//! collection (`host/vendor/surrealkv/HERALD.md`, docs/performance.md#disk-that-stops-growing-issue-79).
//! This test deletes three values in four on an otherwise quiet tree and waits for the directory to
//! shrink to at most twice the live quarter; then it opens the tree again and reads every value back.

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::time::{Duration, Instant};

    use surrealkv::{Tree, TreeBuilder};

    const VALUE: usize = 64 << 10;
    const COUNT: u64 = 768; // 48 MiB

    /// Bytes the directory takes on disk.
    fn du(p: &Path) -> u64 {
        let Ok(m) = std::fs::symlink_metadata(p) else { return 0 };
        if !m.is_dir() {
            return m.blocks() * 512;
        }
        std::fs::read_dir(p).map(|d| d.flatten().map(|e| du(&e.path())).sum()).unwrap_or(0)
    }

    fn open(dir: &Path) -> Tree {
        // Herald's value-log threshold (4 KiB, so these values live in the log), small files and
        // memtable so the test's 48 MiB spans several of each.
        TreeBuilder::new()
            .with_path(dir.to_path_buf())
            .with_enable_vlog(true)
            .with_vlog_value_threshold(4 << 10)
            .with_vlog_max_file_size(8 << 20)
            .with_max_memtable_size(8 << 20)
            .build()
            .unwrap()
    }

    fn value(i: u64) -> Vec<u8> {
        let mut v = vec![(i % 251) as u8; VALUE];
        v[..8].copy_from_slice(&i.to_le_bytes());
        v
    }

    fn kept(i: u64) -> bool {
        i % 4 == 0
    }

    #[test]
    fn deleted_values_leave_the_disk_on_a_quiet_tree_and_the_rest_reads_back() {
        let dir = crate::config::Config::test_scratch().join(format!("engine-space-{}", uuid::Uuid::new_v4()));
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let written = rt.block_on(async {
            let tree = open(&dir);
            for i in 0..COUNT {
                let mut txn = tree.begin().unwrap();
                txn.set(format!("k{i:06}").as_bytes(), &value(i)).unwrap();
                txn.commit().await.unwrap();
            }
            // The last writes are deletions: the newest entries of the tree are tombstones, which a merge
            // into the last level drops (the manifest's last sequence is then above every table's).
            for i in (0..COUNT).filter(|i| !kept(*i)) {
                let mut txn = tree.begin().unwrap();
                txn.delete(format!("k{i:06}").as_bytes()).unwrap();
                txn.commit().await.unwrap();
            }
            let written = du(&dir);
            // No more writes: the tidy task must flush the deletions, merge and collect the log alone.
            let (start, live) = (Instant::now(), COUNT / 4 * VALUE as u64);
            while du(&dir) > live * 2 && start.elapsed() < Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            // Twice the live bytes: the log file that was active during the merge is not collected by it,
            // and the moved values start new files.
            let after = du(&dir);
            assert!(
                after <= live * 2,
                "{after} bytes on disk {:?} after deleting 3/4 of {written} (live {live})",
                start.elapsed()
            );
            tree.close().await.unwrap();
            written
        });
        assert!(written >= COUNT * VALUE as u64, "the test wrote less than it meant to: {written}");
        rt.block_on(async {
            let tree = open(&dir);
            let txn = tree.begin().unwrap();
            for i in 0..COUNT {
                let got = txn.get(format!("k{i:06}").as_bytes()).unwrap();
                if kept(i) {
                    assert!(got.as_deref() == Some(value(i).as_slice()), "value {i} changed or went missing");
                } else {
                    assert!(got.is_none(), "deleted value {i} came back");
                }
            }
            drop(txn);
            tree.close().await.unwrap();
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
