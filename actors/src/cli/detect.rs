//! `radar detect`: replay a CSV file through the worker's runtime core for
//! a monitor file or a graph file, and print what it would have said about
//! every frame.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::PathBuf,
};

use anyhow::Context;
use radar::{
    config::MonitorConfig,
    graph::CompiledGraph,
    replay::{
        JsonNumbers, ReplayOptions, ReplayRecord, replay_graph_in_background, replay_in_background,
    },
};

#[derive(Debug, clap::Args)]
pub struct DetectArgs {
    /// The monitor file (TOML) whose readings, alignment and detector to use.
    #[arg(long, value_name = "MONITOR.toml", required_unless_present = "graph")]
    pub config: Option<PathBuf>,
    /// Instead of a monitor file: a graph file (JSON, see config/graphs/)
    /// whose readings, alignment and nodes to use, as a run of it would.
    /// Its records carry the alarm node's score and threshold once the
    /// graph's detectors are fitted; p-value and per-detector
    /// contributions on flagged frames.
    #[arg(long, value_name = "GRAPH.json", conflicts_with = "config")]
    pub graph: Option<PathBuf>,
    /// The CSV file to replay; its columns are matched to readings by name.
    #[arg(long, value_name = "FILE")]
    pub csv: PathBuf,
    /// Field separator of the CSV file.
    #[arg(long, default_value_t = ',')]
    pub delimiter: char,
    /// Header of the timestamp column (YYYY-MM-DD hh:mm:ss in UTC, RFC 3339 or epoch ms).
    #[arg(long, default_value = "datetime")]
    pub time_column: String,
    /// Print one JSON object per frame instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What scores the frames: a monitor file's detector or a graph's nodes.
enum Model {
    Monitor(MonitorConfig),
    Graph(CompiledGraph),
}

pub fn run(args: DetectArgs) -> anyhow::Result<()> {
    let model = load(&args)?;
    let delimiter = u8::try_from(args.delimiter)
        .ok()
        .filter(u8::is_ascii)
        .with_context(|| {
            format!(
                "--delimiter {:?} must be one ASCII character",
                args.delimiter
            )
        })?;
    let file = File::open(&args.csv)
        .with_context(|| format!("opening CSV file {}", args.csv.display()))?;
    let options = ReplayOptions {
        delimiter,
        time_column: args.time_column,
    };
    // Streams: one row in, one record out, nothing kept but the detector
    // and a few batches of rows read ahead on a second thread. The CSV
    // reader buffers the file itself (another buffer is a copy more).
    let records = match &model {
        Model::Monitor(config) => replay_in_background(config, file, &options),
        Model::Graph(graph) => replay_graph_in_background(graph, file, &options),
    }
    .with_context(|| format!("replaying {}", args.csv.display()))?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    if !args.json {
        writeln!(
            out,
            "row\tts\tphase\tscore\tthreshold\tp_value\tflagged\talarm_open"
        )?;
    }
    let mut numbers = JsonNumbers::default();
    for record in records {
        let record = record.with_context(|| format!("replaying {}", args.csv.display()))?;
        if args.json {
            record.write_json_with(&mut out, &mut numbers)?;
            out.write_all(b"\n")?;
        } else {
            write_row(&mut out, &record)?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The monitor file, or the graph file.
fn load(args: &DetectArgs) -> anyhow::Result<Model> {
    if let Some(path) = &args.graph {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading graph file {}", path.display()))?;
        let graph = CompiledGraph::from_json_str(&text)
            .with_context(|| format!("graph file {} is invalid", path.display()))?;
        return Ok(Model::Graph(graph));
    }
    let path = args
        .config
        .as_ref()
        .context("pass a monitor file (--config) or a graph file (--graph)")?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading monitor file {}", path.display()))?;
    let config = MonitorConfig::from_toml(&text)
        .with_context(|| format!("monitor file {} is invalid", path.display()))?;
    Ok(Model::Monitor(config))
}

fn write_row(out: &mut impl Write, r: &ReplayRecord) -> std::io::Result<()> {
    let num = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.6}"));
    writeln!(
        out,
        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
        r.row,
        r.ts.to_rfc3339(),
        r.phase.as_str(),
        num(r.score),
        num(r.threshold),
        num(r.p_value),
        r.flagged,
        r.alarm_open
    )
}
