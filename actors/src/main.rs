//! The `radar` binary: a thin shell over the CLI.

mod cli;
mod http;
mod logging;
mod monitor;
mod worker;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    radar::config::load_dotenv();
    cli::Cli::parse().run()
}
