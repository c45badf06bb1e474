//! `radar migrate`.

use std::process::ExitCode;

use radar::{config::Settings, store};

pub async fn run(settings: &Settings) -> anyhow::Result<ExitCode> {
    let applied = store::migrate(&settings.database_url).await?;
    if applied.is_empty() {
        println!("The database schema is up to date.");
    } else {
        for version in &applied {
            tracing::info!(version = %version, "Applied migration");
        }
        println!(
            "Applied {} migration(s): {}",
            applied.len(),
            applied.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
