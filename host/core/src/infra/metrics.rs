//! Process metrics in the Prometheus text format: requests by route and status, a request latency
//! histogram, and job runs by kind and outcome. Job counts by state are read from the database when
//! `/metrics` is scraped.
//!
//! Must not import: salvo, surrealdb.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use crate::domain::status::JobStatus;

const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct Registry {
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    jobs: BTreeMap<(String, &'static str), u64>,
    /// Time spent running jobs, by kind (a batch counts once).
    job_seconds: BTreeMap<String, f64>,
    /// Recorded delivery outcomes by status (SENT, BOUNCED, FAILED, CANCELLED).
    deliveries: BTreeMap<String, u64>,
    /// Group-commit batches by engine name.
    group_commit: BTreeMap<&'static str, GroupCommit>,
    /// Workflow executions written, by the status they were written in.
    executions: BTreeMap<&'static str, u64>,
    /// Workflow starts and emails held back by the loop limits, by limit.
    workflow_limits: BTreeMap<&'static str, u64>,
    /// Received messages by what became of them (docs/behaviour.md#receiving-mail).
    inbound: BTreeMap<&'static str, u64>,
    /// Each transport as this process sees it: up (true) or down (docs/delivery.md#a-breaker-per-transport).
    transports: BTreeMap<String, bool>,
}

/// One group-commit counter: its name, its help text and how to read it.
type Series = (&'static str, &'static str, fn(&GroupCommit) -> f64);

#[derive(Default)]
struct GroupCommit {
    batches: u64,
    requests: u64,
    fallbacks: u64,
    write_seconds: f64,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| Mutex::new(Registry::default()));

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}

/// Records one finished request. `route` is the matched route pattern, never the raw path.
pub fn request_finished(method: &str, route: &str, status: u16, elapsed: Duration) {
    let secs = elapsed.as_secs_f64();
    with(|r| {
        *r.requests.entry((method.to_string(), route.to_string(), status)).or_default() += 1;
        let h = r.latency.entry(route.to_string()).or_default();
        h.count += 1;
        h.sum += secs;
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.counts[i] += 1;
            }
        }
    });
}

/// Counts a finished job by kind and outcome (`completed`, `retried`, `dead`, `lease_lost`: the job
/// queue's `Outcome::label`).
pub fn job_finished(kind: &str, outcome: &'static str) {
    with(|r| *r.jobs.entry((kind.to_string(), outcome)).or_default() += 1);
}

/// Adds the time one run of a job kind took, from its claim to its recorded outcome (a batch of jobs is
/// one run).
pub fn job_ran(kind: &str, elapsed: Duration) {
    with(|r| *r.job_seconds.entry(kind.to_string()).or_default() += elapsed.as_secs_f64());
}

/// Counts delivery outcomes once they are recorded.
pub fn deliveries_recorded<'a>(statuses: impl IntoIterator<Item = &'a str>) {
    with(|r| {
        for s in statuses {
            match r.deliveries.get_mut(s) {
                Some(n) => *n += 1,
                None => {
                    r.deliveries.insert(s.to_string(), 1);
                }
            }
        }
    });
}

/// Records one group-commit batch of an engine: its size, whether it fell back to single writes, and its
/// write time.
pub fn group_commit(engine: &'static str, size: usize, fell_back: bool, elapsed: Duration) {
    with(|r| {
        let g = r.group_commit.entry(engine).or_default();
        g.batches += 1;
        g.requests += size as u64;
        g.fallbacks += u64::from(fell_back);
        g.write_seconds += elapsed.as_secs_f64();
    });
}

/// Counts workflow executions written (started or moved), by the status each was written in.
pub fn executions_written(statuses: impl IntoIterator<Item = &'static str>) {
    with(|r| {
        for s in statuses {
            *r.executions.entry(s).or_default() += 1;
        }
    });
}

/// Counts `n` workflow starts or emails held back by the loop limit `limit` (`depth`, `starts`,
/// `emails`).
pub fn workflow_limited(limit: &'static str, n: u64) {
    with(|r| *r.workflow_limits.entry(limit).or_default() += n);
}

/// Counts a received message by what became of it: `bounce`, `delay`, `complaint`, `received`, or why it
/// was dropped (`forged_token`, `unknown_email`, `ignored`, `no_project`, ...).
pub fn inbound(outcome: &'static str) {
    with(|r| *r.inbound.entry(outcome).or_default() += 1);
}

/// How many received messages this process counted with `outcome` (see [`inbound`]).
pub fn inbound_count(outcome: &str) -> u64 {
    with(|r| r.inbound.get(outcome).copied().unwrap_or(0))
}

/// How many workflow executions this process has written in `status` (see [`executions_written`]).
pub fn executions_written_in(status: &str) -> u64 {
    with(|r| r.executions.get(status).copied().unwrap_or(0))
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Records whether a transport is up as this process sees it.
pub fn transport_up(name: &str, up: bool) {
    with(|r| r.transports.insert(name.to_string(), up));
}

/// Renders every metric; `job_states` are the current job counts by state, `deferred` the emails
/// deferred now (None when it could not be counted).
pub fn render(job_states: &[(String, i64)], deferred: Option<i64>) -> String {
    let mut out = String::new();
    with(|r| {
        out.push_str("# HELP herald_http_requests_total HTTP requests by method, route and status.\n");
        out.push_str("# TYPE herald_http_requests_total counter\n");
        for ((m, route, status), n) in &r.requests {
            let _ = writeln!(
                out,
                "herald_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {n}",
                esc(m),
                esc(route)
            );
        }
        out.push_str("# HELP herald_http_request_duration_seconds HTTP request latency by route.\n");
        out.push_str("# TYPE herald_http_request_duration_seconds histogram\n");
        for (route, h) in &r.latency {
            let route = esc(route);
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "herald_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{b}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "herald_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "herald_http_request_duration_seconds_sum{{route=\"{route}\"}} {}", h.sum);
            let _ = writeln!(out, "herald_http_request_duration_seconds_count{{route=\"{route}\"}} {}", h.count);
        }
        out.push_str("# HELP herald_job_runs_total Job runs in this process by kind and outcome.\n");
        out.push_str("# TYPE herald_job_runs_total counter\n");
        for ((kind, outcome), n) in &r.jobs {
            let _ = writeln!(out, "herald_job_runs_total{{kind=\"{}\",outcome=\"{outcome}\"}} {n}", esc(kind));
        }
        out.push_str("# HELP herald_job_seconds_total Time this process spent running jobs, by kind.\n");
        out.push_str("# TYPE herald_job_seconds_total counter\n");
        for (kind, secs) in &r.job_seconds {
            let _ = writeln!(out, "herald_job_seconds_total{{kind=\"{}\"}} {secs:.3}", esc(kind));
        }
        out.push_str("# HELP herald_emails_delivered_total Delivery outcomes recorded in this process by status.\n");
        out.push_str("# TYPE herald_emails_delivered_total counter\n");
        for (status, n) in &r.deliveries {
            let _ = writeln!(out, "herald_emails_delivered_total{{status=\"{}\"}} {n}", esc(status));
        }
        out.push_str(
            "# HELP herald_workflow_executions_written_total Workflow executions written in this process (started or moved), by the status written.\n",
        );
        out.push_str("# TYPE herald_workflow_executions_written_total counter\n");
        for (status, n) in &r.executions {
            let _ = writeln!(out, "herald_workflow_executions_written_total{{status=\"{status}\"}} {n}");
        }
        out.push_str(
            "# HELP herald_workflow_limited_total Workflow starts (depth, starts), emails (emails) and SCHEDULE ticks (audience) held back by their limits.\n",
        );
        out.push_str("# TYPE herald_workflow_limited_total counter\n");
        for (limit, n) in &r.workflow_limits {
            let _ = writeln!(out, "herald_workflow_limited_total{{limit=\"{limit}\"}} {n}");
        }
        out.push_str("# HELP herald_inbound_messages_total Messages received over SMTP, by outcome.\n");
        out.push_str("# TYPE herald_inbound_messages_total counter\n");
        for (outcome, n) in &r.inbound {
            let _ = writeln!(out, "herald_inbound_messages_total{{outcome=\"{outcome}\"}} {n}");
        }
        out.push_str(
            "# HELP herald_transport_up Whether each transport is up (1) or down (0), as this process sees it.\n",
        );
        out.push_str("# TYPE herald_transport_up gauge\n");
        for (name, up) in &r.transports {
            let _ = writeln!(out, "herald_transport_up{{transport=\"{}\"}} {}", esc(name), u8::from(*up));
        }
        let series: [Series; 4] = [
            ("batches", "Group-commit batches written, by engine (ingest: /v1/track, accept: /v1/send).", |g| {
                g.batches as f64
            }),
            ("requests", "Requests in those batches.", |g| g.requests as f64),
            ("fallbacks", "Batches that fell back to one request at a time.", |g| g.fallbacks as f64),
            ("write_seconds", "Time spent writing batches.", |g| g.write_seconds),
        ];
        for (name, help, value) in series {
            let _ = writeln!(out, "# HELP herald_group_commit_{name}_total {help}");
            let _ = writeln!(out, "# TYPE herald_group_commit_{name}_total counter");
            for (engine, g) in &r.group_commit {
                let _ = writeln!(out, "herald_group_commit_{name}_total{{engine=\"{engine}\"}} {}", value(g));
            }
        }
    });
    if let Some(n) = deferred {
        out.push_str(
            "# HELP herald_emails_deferred Emails waiting to be tried again (DEFERRED), in the whole database.\n",
        );
        out.push_str("# TYPE herald_emails_deferred gauge\n");
        let _ = writeln!(out, "herald_emails_deferred {n}");
    }
    out.push_str("# HELP herald_jobs Jobs in the queue by state.\n");
    out.push_str("# TYPE herald_jobs gauge\n");
    for state in JobStatus::ALL.iter().map(|s| s.as_str()) {
        let n = job_states.iter().find(|(s, _)| s == state).map(|(_, n)| *n).unwrap_or(0);
        let _ = writeln!(out, "herald_jobs{{state=\"{state}\"}} {n}");
    }
    out
}
