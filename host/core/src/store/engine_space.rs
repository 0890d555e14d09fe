//! The storage engine under the embedded default gives deleted space back to the file system by itself.
//!
//! SurrealKV 0.21.4 kept it: a deletion waited in the memtable until enough other writes filled it,
//! leveled compaction never brought tombstones down to the data they deleted once that data lay in a
//! level their few bytes never pushed over its size, and a value-log file stayed while any table, or any
//! older file, held one live value. Herald builds SurrealKV with a tidy task, deletion merges and value-log
//! collection (`host/vendor/surrealkv/HERALD.md`, docs/performance.md#disk-that-stops-growing-issue-79).
//! These tests delete three values in four, or all of them, on an otherwise quiet tree and wait for the
//! directory to shrink to at most twice what is left and one log file; then they open the tree again and read every value
//! back.

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::time::{Duration, Instant};

    use surrealkv::{Tree, TreeBuilder};

    const VALUE: usize = 64 << 10;
    const COUNT: u64 = 768; // 48 MiB
    const LOG_FILE: u64 = 8 << 20;

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
            .with_vlog_max_file_size(LOG_FILE)
            .with_max_memtable_size(8 << 20)
            .build()
            .unwrap()
    }

    fn value(i: u64) -> Vec<u8> {
        let mut v = vec![(i % 251) as u8; VALUE];
        v[..8].copy_from_slice(&i.to_le_bytes());
        v
    }

    #[test]
    fn deleted_values_leave_the_disk_on_a_quiet_tree_and_the_rest_reads_back() {
        // Three in four deleted: the kept values are moved out of the log files they leave mostly empty.
        shrinks("quarter", |i| i % 4 == 0);
    }

    #[test]
    fn a_log_whose_values_were_all_deleted_leaves_the_disk() {
        // Nothing kept: no table references the log any more, and every file but the one being written goes.
        shrinks("none", |_| false);
    }

    /// Writes COUNT values, deletes those `kept` refuses, waits (no more writes) for the directory to fall
    /// to at most twice the kept bytes plus one log file, then reopens the tree and reads every value.
    fn shrinks(name: &str, kept: fn(u64) -> bool) {
        let dir = crate::config::Config::test_scratch().join(format!("engine-space-{name}-{}", uuid::Uuid::new_v4()));
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let written = rt.block_on(async {
            let tree = open(&dir);
            for i in 0..COUNT {
                let mut txn = tree.begin().unwrap();
                txn.set(format!("k{i:06}").as_bytes(), value(i)).unwrap();
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
            let live = (0..COUNT).filter(|i| kept(*i)).count() as u64 * VALUE as u64;
            let (start, bound) = (Instant::now(), live * 2 + LOG_FILE + (1 << 20));
            while du(&dir) > bound && start.elapsed() < Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            // Twice the live bytes: the log file that was active during the merge is not collected by it,
            // and the moved values start new files; and the file being written, which nothing collects.
            let after = du(&dir);
            assert!(
                after <= bound,
                "{after} bytes on disk {:?} after the deletions, of {written} written (live {live})",
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
