//! `lavinmqctl`: administers a running broker with LavinMQ's commands and
//! flags, over the broker's control socket (HTTP/1.1 on a Unix socket, where
//! the caller is trusted as an administrator) or, with `--uri`, over the
//! management HTTP API of a remote broker.
//!
//! ```text
//! lavinmqctl [-p vhost] [-f text|json] [-q] <command> [arguments]
//! ```

// A binary's root file resolves `mod` paths like a `mod.rs`, so point at
// the modules under `src/bin/lavinmqctl/` explicitly.
#[path = "lavinmqctl/api.rs"]
mod api;
#[path = "lavinmqctl/cli.rs"]
mod cli;
#[path = "lavinmqctl/client.rs"]
mod client;
#[path = "lavinmqctl/commands/mod.rs"]
mod commands;
#[path = "lavinmqctl/error.rs"]
mod error;
#[path = "lavinmqctl/output.rs"]
mod output;
#[path = "lavinmqctl/percent.rs"]
mod percent;
#[path = "lavinmqctl/target.rs"]
mod target;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command, GlobalOpts};
use crate::error::{CtlError, CtlResult, EXIT_FAILURE, EXIT_USAGE};

/// Connects the pieces for one command and runs it.
async fn run(global: GlobalOpts, command: Command) -> CtlResult<()> {
    let target = target::Target::resolve(&global)?;
    let ctx = commands::Ctx {
        api: api::Api::new(client::Client::new(target)),
        out: output::Output::new(global.format, global.quiet, global.silent),
        vhost_option: global.vhost,
    };
    commands::run(&ctx, command).await
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.global.build_info {
        println!(
            "lavinmqctl {} ({} {})",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH
        );
        return ExitCode::SUCCESS;
    }
    let Some(mut command) = cli.command else {
        eprintln!("{}", Cli::command().render_help());
        return ExitCode::from(EXIT_USAGE);
    };
    let mut global = cli.global;
    // `add_federation <name> --uri=amqp://...`: the global --uri holds the
    // upstream's URI, not the API's.
    if let Command::AddFederation(a) = &mut command
        && a.upstream_uri.is_none()
        && global
            .uri
            .as_deref()
            .is_some_and(|u| u.starts_with("amqp://") || u.starts_with("amqps://"))
    {
        a.upstream_uri = global.uri.take();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("Error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    match runtime.block_on(run(global, command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            if matches!(e, CtlError::Usage(_)) {
                eprintln!("Run 'lavinmqctl help' for the commands and their arguments.");
            }
            ExitCode::from(e.exit_code())
        }
    }
}
