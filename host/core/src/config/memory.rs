//! The memory budget (issue 79, docs/behaviour.md#memory-budget): `--memory-budget-mb` /
//! `HERALD_MEMORY_BUDGET_MB` sizes from one number what holds memory in proportion to a setting: the
//! embedded database's block cache and memtable (the memtable counts twice: a flush holds the full one
//! while the next fills), the job worker's concurrency, the async workers and the blocking pool. A size
//! set by its own setting wins. Without a budget every size is the one Herald has always had. The
//! binary (`host/src/memory.rs`) also turns transparent huge pages off and lets the kernel drop the
//! start-up's code pages when a budget is set.

/// Smallest budget: below it the fixed part (code, runtime, engine) is already over.
pub const MIN_BUDGET_MB: u64 = 64;

/// The sizes a budget gives, explicit settings applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySizes {
    /// SurrealKV block cache, MiB.
    pub cache_mb: u64,
    /// SurrealKV memtable, MiB.
    pub memtable_mb: u64,
    /// Jobs one worker runs at once.
    pub job_concurrency: usize,
}

impl MemorySizes {
    /// The sizes for `budget_mb` (None: today's defaults, 128 MiB cache, 64 MiB memtable, 8 jobs), each
    /// replaced by its explicit setting when there is one. With a budget: an eighth to the block cache
    /// (8-128 MiB), a sixteenth to the memtable (4-64 MiB, so both memtables of a flush take an eighth),
    /// one job per 32 MiB (2-8).
    pub fn of(budget_mb: Option<u64>, cache_mb: Option<u64>, memtable_mb: Option<u64>, jobs: Option<usize>) -> Self {
        let budget = budget_mb.map(|b| b.max(MIN_BUDGET_MB));
        let cache = budget.map_or(128, |b| (b / 8).clamp(8, 128));
        let memtable = budget.map_or(64, |b| (b / 16).clamp(4, 64));
        let job_default = budget.map_or(8, |b| (b / 32).clamp(2, 8) as usize);
        MemorySizes {
            cache_mb: cache_mb.unwrap_or(cache).max(8),
            memtable_mb: memtable_mb.unwrap_or(memtable).max(4),
            job_concurrency: jobs.unwrap_or(job_default).max(1),
        }
    }
}

/// Async worker threads: twice the cores, at least four, without a budget (host/src/main.rs says why);
/// with one, a worker per 64 MiB of it, at least two and at most that default (each worker keeps its own
/// allocator pages and buffers).
pub fn worker_threads(budget_mb: Option<u64>, cores: usize) -> usize {
    let default = (2 * cores).max(4);
    match budget_mb {
        None => default,
        Some(b) => ((b.max(MIN_BUDGET_MB) / 64) as usize).clamp(2, default),
    }
}

/// Most threads of the blocking pool (template rendering, file I/O): tokio's 512 without a budget, one
/// per 8 MiB of a budget otherwise (at least 8).
pub fn max_blocking_threads(budget_mb: Option<u64>) -> usize {
    budget_mb.map_or(512, |b| ((b.max(MIN_BUDGET_MB) / 8) as usize).clamp(8, 512))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_budget_splits_into_the_sizes() {
        assert_eq!(
            MemorySizes::of(None, None, None, None),
            MemorySizes { cache_mb: 128, memtable_mb: 64, job_concurrency: 8 },
            "no budget: today's sizes"
        );
        assert_eq!(
            MemorySizes::of(Some(128), None, None, None),
            MemorySizes { cache_mb: 16, memtable_mb: 8, job_concurrency: 4 }
        );
        assert_eq!(
            MemorySizes::of(Some(512), None, None, None),
            MemorySizes { cache_mb: 64, memtable_mb: 32, job_concurrency: 8 }
        );
        assert_eq!(
            MemorySizes::of(Some(4096), None, None, None),
            MemorySizes { cache_mb: 128, memtable_mb: 64, job_concurrency: 8 },
            "a large budget never goes past the defaults"
        );
        assert_eq!(
            MemorySizes::of(Some(1), None, None, None),
            MemorySizes { cache_mb: 8, memtable_mb: 4, job_concurrency: 2 },
            "a budget below the floor is the floor"
        );
        assert_eq!((worker_threads(Some(128), 2), worker_threads(Some(512), 2), worker_threads(None, 2)), (2, 4, 4));
        assert_eq!((worker_threads(Some(512), 8), worker_threads(Some(4096), 8)), (8, 16));
        assert_eq!(
            (max_blocking_threads(Some(128)), max_blocking_threads(Some(512)), max_blocking_threads(None)),
            (16, 64, 512)
        );
    }

    #[test]
    fn memory_budget_yields_to_explicit_settings() {
        assert_eq!(
            MemorySizes::of(Some(128), Some(48), Some(24), Some(6)),
            MemorySizes { cache_mb: 48, memtable_mb: 24, job_concurrency: 6 }
        );
        assert_eq!(MemorySizes::of(Some(128), None, Some(2), Some(0)).memtable_mb, 4, "floors still hold");
        assert_eq!(MemorySizes::of(None, Some(16), None, None).memtable_mb, 64);
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        settings: super::super::Settings,
    }

    #[test]
    fn memory_budget_flag_parses_and_sizes_the_config() {
        use clap::Parser;
        let cli = Cli::try_parse_from(["herald", "--memory-budget-mb", "128", "--db-cache-mb", "24"]).unwrap();
        assert_eq!(cli.settings.memory_budget_mb, Some(128));
        let c = super::super::Settings { db: Some("mem://".into()), ..cli.settings }.resolve().unwrap();
        assert_eq!(c.memory_budget_mb, Some(128));
        assert_eq!((c.db_cache_bytes >> 20, c.db_memtable_bytes >> 20, c.job_concurrency), (24, 8, 4));
        let toml: super::super::Settings = toml::from_str("memory_budget_mb = 512").unwrap();
        let c = super::super::Settings { db: Some("mem://".into()), ..toml }.resolve().unwrap();
        assert_eq!((c.db_cache_bytes >> 20, c.db_memtable_bytes >> 20, c.job_concurrency), (64, 32, 8));
    }
}
