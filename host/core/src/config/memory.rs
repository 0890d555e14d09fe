//! The memory budget (issue 79, docs/behaviour.md#memory-budget): `--memory-budget-mb` /
//! `HERALD_MEMORY_BUDGET_MB` sizes from one number what holds memory in proportion to a setting: the
//! embedded database's block cache and memtable (the memtable counts twice: a flush holds the full one
//! while the next fills), the job worker's concurrency, the rounds of a campaign's send, the async
//! workers and the blocking pool. A size
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
    /// Recipients a campaign's send writes per round (each round's emails and jobs are built in memory
    /// and written in one transaction).
    pub campaign_batch: usize,
    /// Emails one campaign delivery job carries (all of them rendered and held while it runs).
    pub campaign_chunk: usize,
}

impl MemorySizes {
    /// The sizes for `budget_mb` (None: today's defaults, 128 MiB cache, 64 MiB memtable, 8 jobs,
    /// campaign rounds of 100), each replaced by its explicit setting when there is one. With a budget:
    /// an eighth to the block cache (8-128 MiB), a sixteenth to the memtable (4-64 MiB, so both memtables
    /// of a flush take an eighth), one job per 32 MiB (2-8), and one campaign recipient per round and per
    /// delivery job for each 5 MiB (25-100: a round's rows and a job's rendered emails stay a few MiB
    /// while several jobs run at once).
    pub fn of(budget_mb: Option<u64>, explicit: Explicit) -> Self {
        let budget = budget_mb.map(|b| b.max(MIN_BUDGET_MB));
        let cache = budget.map_or(128, |b| (b / 8).clamp(8, 128));
        let memtable = budget.map_or(64, |b| (b / 16).clamp(4, 64));
        let job_default = budget.map_or(8, |b| (b / 32).clamp(2, 8) as usize);
        let round = budget.map_or(100, |b| (b / 5).clamp(25, 100) as usize);
        MemorySizes {
            cache_mb: explicit.cache_mb.unwrap_or(cache).max(8),
            memtable_mb: explicit.memtable_mb.unwrap_or(memtable).max(4),
            job_concurrency: explicit.jobs.unwrap_or(job_default).max(1),
            campaign_batch: explicit.campaign_batch.unwrap_or(round).clamp(1, 5000),
            campaign_chunk: explicit.campaign_chunk.unwrap_or(round).clamp(1, 1000),
        }
    }
}

/// The settings that name one of the sizes themselves; each wins over the budget's share.
#[derive(Debug, Clone, Copy, Default)]
pub struct Explicit {
    pub cache_mb: Option<u64>,
    pub memtable_mb: Option<u64>,
    pub jobs: Option<usize>,
    pub campaign_batch: Option<usize>,
    pub campaign_chunk: Option<usize>,
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

    fn sizes(cache_mb: u64, memtable_mb: u64, jobs: usize, round: usize) -> MemorySizes {
        MemorySizes { cache_mb, memtable_mb, job_concurrency: jobs, campaign_batch: round, campaign_chunk: round }
    }

    #[test]
    fn memory_budget_splits_into_the_sizes() {
        let none = Explicit::default();
        assert_eq!(MemorySizes::of(None, none), sizes(128, 64, 8, 100), "no budget: today's sizes");
        assert_eq!(MemorySizes::of(Some(128), none), sizes(16, 8, 4, 25));
        assert_eq!(MemorySizes::of(Some(256), none), sizes(32, 16, 8, 51));
        assert_eq!(MemorySizes::of(Some(512), none), sizes(64, 32, 8, 100));
        assert_eq!(
            MemorySizes::of(Some(4096), none),
            sizes(128, 64, 8, 100),
            "a large budget never goes past the defaults"
        );
        assert_eq!(MemorySizes::of(Some(1), none), sizes(8, 4, 2, 25), "a budget below the floor is the floor");
        assert_eq!((worker_threads(Some(128), 2), worker_threads(Some(512), 2), worker_threads(None, 2)), (2, 4, 4));
        assert_eq!((worker_threads(Some(512), 8), worker_threads(Some(4096), 8)), (8, 16));
        assert_eq!(
            (max_blocking_threads(Some(128)), max_blocking_threads(Some(512)), max_blocking_threads(None)),
            (16, 64, 512)
        );
    }

    #[test]
    fn memory_budget_yields_to_explicit_settings() {
        let set = |cache, memtable, jobs, batch, chunk| Explicit {
            cache_mb: cache,
            memtable_mb: memtable,
            jobs,
            campaign_batch: batch,
            campaign_chunk: chunk,
        };
        assert_eq!(
            MemorySizes::of(Some(128), set(Some(48), Some(24), Some(6), Some(300), Some(60))),
            MemorySizes { cache_mb: 48, memtable_mb: 24, job_concurrency: 6, campaign_batch: 300, campaign_chunk: 60 }
        );
        let floors = MemorySizes::of(Some(128), set(None, Some(2), Some(0), Some(0), Some(9999)));
        assert_eq!((floors.memtable_mb, floors.job_concurrency), (4, 1), "floors still hold");
        assert_eq!((floors.campaign_batch, floors.campaign_chunk), (1, 1000), "so do the rounds' bounds");
        assert_eq!(MemorySizes::of(None, set(Some(16), None, None, None, None)).memtable_mb, 64);
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
        assert_eq!((c.campaign_batch_size, c.campaign_delivery_chunk), (25, 25));
        let toml: super::super::Settings = toml::from_str("memory_budget_mb = 512").unwrap();
        let c = super::super::Settings { db: Some("mem://".into()), ..toml }.resolve().unwrap();
        assert_eq!((c.db_cache_bytes >> 20, c.db_memtable_bytes >> 20, c.job_concurrency), (64, 32, 8));
        assert_eq!((c.campaign_batch_size, c.campaign_delivery_chunk), (100, 100));
    }
}
