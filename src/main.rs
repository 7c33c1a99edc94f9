//! The bucketd binary: parse flags, then run `bucketd token …` or set up logging and run the
//! server until SIGTERM or ctrl-c.

use std::process::ExitCode;

use bucketd::config::{Command, Config, LogFormat};
use clap::Parser;
use tracing_subscriber::EnvFilter;

// mimalloc rather than the system allocator: the threads that parse and merge pushes allocate
// all the time (packed readings, the buffers' row blocks, string values), and the flusher frees
// most of it once written, often on another thread. mimalloc's per-thread heaps keep that
// traffic cheap, and it can be asked to give freed memory back to the OS (src/alloc.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::parse();
    if let Some(Command::Token(args)) = &config.command {
        return match bucketd::tokens::cli::run(args, &mut std::io::stdout(), &mut std::io::stderr())
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bucketd token: {e}");
                ExitCode::FAILURE
            }
        };
    }
    init_tracing(config.log_format);
    let result = async {
        let store = bucketd::server::open_store(&config).await?;
        bucketd::server::run(config, store, bucketd::server::shutdown_signal()).await
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour codes only for a person at a terminal, not in files or log collectors.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
