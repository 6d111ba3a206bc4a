//! `hearth`: the daemon (`hearth up`) and the CLI that talks to it.
//! This binary only wires; the work lives in the library crates.

mod client;
mod config;
mod daemon;
mod datadir;
mod deploy;
mod dlq;
mod kv;
mod logs;
mod otlp;
mod recordings;
mod releases;
mod schedules;
mod secrets;
mod serve;
mod tokens;
mod triggers;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// glibc's malloc, free and chunk consolidation were about a fifth of the
/// daemon's CPU on the invocation path (`perf`); with mimalloc the wasm
/// hello function serves ~14% more requests on the same CPU
/// (bench/RESULTS.md §2).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hearth: a self-hostable serverless platform.
#[derive(Debug, Parser)]
#[command(name = "hearth", version, about)]
struct Cli {
    /// Data directory: the daemon keeps its state here; the CLI finds the
    /// server and token here unless HEARTH_URL / HEARTH_TOKEN say otherwise.
    #[arg(
        long,
        global = true,
        env = "HEARTH_DATA_DIR",
        default_value = ".hearth"
    )]
    data_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the daemon (default: 127.0.0.1:8080, data under ./.hearth).
    /// (Both boxed: a command is parsed once, and the enum stays small.)
    Up(Box<config::UpArgs>),
    #[command(flatten)]
    Client(Box<client::ClientCommand>),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Up(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("HEARTH_LOG")
                        .unwrap_or_else(|_| "info".into()),
                )
                .with_writer(std::io::stderr)
                .init();
            let settings = config::Settings::resolve(&cli.data_dir, &args)?;
            // Before any thread: every thread and process inherits it.
            hearth_host::priority::ask_for_short_slices();
            // One worker more than cores: long invocations may hold all but
            // one (`hearth_node`'s long runs), and still use every core.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(cores + 1)
                .on_thread_start(hearth_node::start_threads_at_this_priority())
                .enable_all()
                .build()?
                .block_on(daemon::run(settings))
        }
        Command::Client(cmd) => {
            quiet_on_closed_pipe();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(client::run(&cli.data_dir, *cmd))
        }
    }
}

/// A CLI whose reader went away (`hearth ls | head -1`) ends the way
/// `ls` or `cat` do: killed by SIGPIPE, silently. Rust ignores SIGPIPE, so
/// without this every `println!` after the reader left would panic with
/// "Broken pipe". The daemon keeps ignoring it: a client that hangs up is
/// an error to handle there, not a reason to stop.
fn quiet_on_closed_pipe() {
    // SAFETY: at start, before any thread; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
