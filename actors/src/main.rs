//! The `radar` binary: a thin shell over the CLI.

mod cli;
mod http;
mod logging;
mod monitor;
mod worker;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    radar::tls::install_default_provider();
    radar::config::load_dotenv();
    cli::Cli::parse().run()
}
