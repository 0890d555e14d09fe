//! The `herald` binary: parse the command line, then serve, migrate or administer.

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: the database engine allocates heavily, and under load glibc's
/// malloc/free took about a third of the server's CPU in the track benchmark. The `system-allocator`
/// feature keeps glibc's, for heap profilers that intercept malloc (heaptrack).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use herald_host::App;
use herald_host::config::Settings;
use herald_host::infra::telemetry;
use herald_host::services::accounts;
use herald_host::services::backup::{self, BackupError};
use herald_host::store::Store;

mod memory;

#[derive(Parser)]
#[command(name = "herald", version, about = "Herald: self-hostable email messaging service")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API and the job workers
    Serve {
        #[command(flatten)]
        settings: Settings,
    },
    /// Apply database migrations and exit
    Migrate {
        /// List what would be applied (and what changed since it was applied) without applying anything
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        settings: Settings,
    },
    /// Write a backup of the embedded database to a new folder, through the running server when there is
    /// one (docs/behaviour.md#backups); prints its manifest
    Backup {
        /// The folder to create, e.g. /var/backups/herald-2026-12-07
        dest: std::path::PathBuf,
        #[command(flatten)]
        settings: Settings,
    },
    /// Restore a backup into a new (or empty) embedded data directory and apply newer migrations
    Restore {
        /// The backup's folder
        src: std::path::PathBuf,
        /// The data directory to create (what HERALD_DB=surrealkv://DIR will name)
        #[arg(long)]
        data: std::path::PathBuf,
        #[command(flatten)]
        settings: Settings,
    },
    /// Manage projects directly in the configured database
    Project {
        #[command(subcommand)]
        command: ProjectCommand,
    },
    /// Print the hex key that signs POST /webhooks/notifications (derived from the server secret)
    NotificationsKey {
        #[command(flatten)]
        settings: Settings,
    },
    /// Manage sender domains directly in the configured database
    Domain {
        #[command(subcommand)]
        command: DomainCommand,
    },
}

#[derive(Subcommand)]
enum DomainCommand {
    /// Add a sender domain to a project and print it with its DNS records as JSON
    Add {
        /// Domain name, e.g. mail.example.com
        domain: String,
        /// Project id
        #[arg(long)]
        project: String,
        /// Mark it verified without DNS checks (local development)
        #[arg(long)]
        trust: bool,
        #[command(flatten)]
        settings: Settings,
    },
}

#[derive(Subcommand)]
enum ProjectCommand {
    /// Create a project and print {id, name, public, secret} as JSON
    Create {
        /// Project name
        name: String,
        /// Also create (or reuse) this user as the project's OWNER
        #[arg(long)]
        owner: Option<String>,
        /// Password for a new owner user
        #[arg(long, requires = "owner")]
        password: Option<String>,
        #[command(flatten)]
        settings: Settings,
    },
    /// Lift a project's suspension: its sending works again and its held deliveries go out
    Unsuspend {
        /// Project id
        project: String,
        #[command(flatten)]
        settings: Settings,
    },
}

/// Async worker threads: twice the cores, at least four (`TOKIO_WORKER_THREADS` overrides). The embedded
/// database runs each query inside its caller's future, so a large write (a 1.5 MB message with its text
/// part) holds a worker for a while; with one worker per core, two such writes left nothing to answer
/// `/health` (p99 17-24 ms on two cores against 6-8 ms with four workers, `--bench compose`), while the
/// tracking benchmark was unchanged (49% / 50% of its ceiling).
/// A memory budget lowers it (`config::worker_threads`).
fn worker_threads(budget_mb: Option<u64>) -> usize {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let default = herald_host::config::worker_threads(budget_mb, cores);
    std::env::var("TOKIO_WORKER_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Exit codes (docs/behaviour.md#command-line): 1 anything else, 2 the command line or the settings,
/// 3 the database cannot be opened (locked by another process, not a directory, not writable, full), 4 an
/// address cannot be listened on.
fn exit_code(e: &anyhow::Error) -> u8 {
    use herald_host::BuildError;
    if e.downcast_ref::<herald_host::config::ConfigError>().is_some() {
        return 2;
    }
    match e.downcast_ref::<BackupError>() {
        Some(BackupError::Refused(_)) => return 2,
        Some(BackupError::Store(_)) => return 3,
        Some(BackupError::Io(_)) => return 1,
        None => {}
    }
    match e.downcast_ref::<BuildError>() {
        Some(BuildError::Store(_)) | Some(BuildError::Secret(_)) => 3,
        Some(BuildError::Listen(_)) => 4,
        _ if e.downcast_ref::<herald_host::store::StoreError>().is_some() => 3,
        _ => 1,
    }
}

/// Runs the command; a failure is one line on stderr (its causes joined, no backtrace) and an exit code.
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The memory budget of `serve` (docs/behaviour.md#memory-budget) sizes the runtime's threads too.
    let budget = match &cli.command {
        Command::Serve { settings } => settings.clone().resolve().ok().and_then(|c| c.memory_budget_mb),
        _ => None,
    };
    if budget.is_some() {
        memory::no_huge_pages();
        memory::purge_freed_memory_at_once();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads(budget))
        .max_blocking_threads(herald_host::config::max_blocking_threads(budget))
        .enable_all()
        .build();
    let outcome = match runtime {
        Ok(rt) => rt.block_on(run(cli)),
        Err(e) => Err(e.into()),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let causes: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            let mut said: Vec<String> = Vec::new();
            for c in causes {
                if !said.iter().any(|s| s.contains(&c)) {
                    said.push(c);
                }
            }
            eprintln!("herald: {}", said.join(": "));
            std::process::ExitCode::from(exit_code(&e))
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { settings } => {
            let config = settings.resolve()?;
            telemetry::init(config.log_format, &config.log);
            let budget = config.memory_budget_mb;
            let app = App::build(config).await?;
            let store = app.state.store.clone();
            let running = app.listen().await?;
            tracing::info!(addr = %running.addr, "herald is listening");
            if budget.is_some() {
                // The start-up's code runs once, and a fault maps a whole large folio of code: let the
                // kernel page the executable's pages out 10 s after start and every 30 s (`memory::trim_code`).
                tokio::spawn(async {
                    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
                    loop {
                        let bytes = memory::trim_code();
                        tracing::debug!(bytes, "code pages unmapped");
                        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                    }
                });
            }
            shutdown_signal().await;
            tracing::info!("shutting down");
            running.shutdown().await;
            store.close_last(std::time::Duration::from_secs(5)).await;
            Ok(())
        }
        Command::Migrate { dry_run, settings } => {
            let config = settings.resolve()?;
            telemetry::init(config.log_format, &config.log);
            let store = Store::connect_only(&config).await?;
            let out = match dry_run {
                true => herald_host::store::migrate::plan(&store).await.map(|p| serde_json::json!(p)),
                false => herald_host::store::migrate::apply(&store).await.map(|a| serde_json::json!({ "applied": a })),
            };
            store.close_last(std::time::Duration::from_secs(5)).await;
            println!("{}", out?);
            Ok(())
        }
        Command::Backup { dest, settings } => {
            let config = settings.resolve()?;
            telemetry::init(config.log_format, "warn");
            let manifest = backup_through_server_or_here(&config, &dest).await?;
            println!("{}", serde_json::to_string_pretty(&manifest)?);
            Ok(())
        }
        Command::Restore { src, data, settings } => {
            let mut config = settings.resolve()?;
            telemetry::init(config.log_format, "warn");
            config.db = format!("surrealkv://{}", std::path::absolute(&data)?.display());
            let restored = backup::restore(&src, &config).await?;
            println!("{}", serde_json::to_string_pretty(&restored)?);
            Ok(())
        }
        Command::NotificationsKey { settings } => {
            let config = settings.resolve()?;
            telemetry::init(config.log_format, "warn");
            let app = App::build(config).await?;
            println!("{}", hex::encode(&app.state.notifications_key));
            app.close().await;
            Ok(())
        }
        Command::Domain { command: DomainCommand::Add { domain, project, trust, settings } } => {
            let config = settings.resolve()?;
            telemetry::init(config.log_format, "warn");
            let app = App::build(config).await?;
            let out = add_domain(&app, &domain, &project, trust).await;
            app.close().await;
            println!("{}", serde_json::to_string_pretty(&out?)?);
            Ok(())
        }
        Command::Project { command: ProjectCommand::Create { name, owner, password, settings } } => {
            let config = settings.resolve()?;
            telemetry::init(config.log_format, "warn");
            let app = App::build(config).await?;
            let st = &app.state;
            let made = accounts::create_project_for(st, &name, owner.as_deref(), password.as_deref()).await;
            app.close().await;
            let (project, keys) = made.map_err(|e| anyhow::anyhow!("{e}"))?;
            let out = serde_json::json!({
                "id": project.id, "name": project.name, "public": keys.public, "secret": keys.secret
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Command::Project { command: ProjectCommand::Unsuspend { project, settings } } => {
            let config = settings.resolve()?;
            telemetry::init(config.log_format, "warn");
            let app = App::build(config).await?;
            let lifted = herald_host::services::suspension::operator_unsuspend(&app.state, &project).await;
            app.close().await;
            let released = lifted.map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("{}", serde_json::json!({ "project": project, "releasedJobs": released }));
            Ok(())
        }
    }
}

/// A backup through the server listening on the data directory's socket, or, with none there, with the
/// database opened here (it fails to open while another process holds it).
async fn backup_through_server_or_here(
    config: &herald_host::config::Config,
    dest: &std::path::Path,
) -> anyhow::Result<backup::Manifest> {
    use herald_host::control;
    let Some(socket) = control::socket_path(&config.db) else {
        let why = "herald backup reads the embedded database (HERALD_DB=surrealkv://DIR); on a SurrealDB server use surreal export";
        return Err(BackupError::Refused(why.into()).into());
    };
    let dest = std::path::absolute(dest)?;
    match control::request(&socket, &dest).await? {
        Some(control::Answer { manifest: Some(m), .. }) => Ok(m),
        Some(control::Answer { error, refused: true, .. }) => {
            Err(BackupError::Refused(error.unwrap_or_default()).into())
        }
        Some(control::Answer { error, .. }) => Err(BackupError::Io(error.unwrap_or_default()).into()),
        None => {
            let store = Store::connect_only(config).await?;
            let now = herald_host::infra::clock::wall_now_ms();
            let written = backup::write(&store, config, &dest, now).await;
            store.close_last(std::time::Duration::from_secs(5)).await;
            Ok(written?)
        }
    }
}

async fn add_domain(app: &App, domain: &str, project: &str, trust: bool) -> anyhow::Result<serde_json::Value> {
    let st = &app.state;
    if accounts::project_settings(st, project).await?.is_none() {
        anyhow::bail!("no project has the id {project}");
    }
    let d = st.domains.add(&st.store, project, domain, trust, st.clock.now_ms()).await?;
    Ok(serde_json::to_value(herald_host::api::domains::DomainOut::from(&d))?)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
