//! The Markdown tables `radar-bench` prints for BENCHMARKS.md: the
//! machine, then one table per scenario with its ceiling beside it.

use radar_bench::{
    checkpoint::CheckpointResult,
    idle::IdleReport,
    ingest::{self, Consumer, Env, IngestReport},
    recovery::RecoveryReport,
    stats, system,
};
use rumqttc::QoS;

pub(super) fn print_machine(env: &Env) {
    let m = system::Machine::read();
    println!("## Machine\n");
    println!(
        "{} cores, {}, {} MiB RAM, Linux {}; load average at start {}; radar binary {}\n",
        m.cores,
        m.cpu_model,
        m.mem_total_mib,
        m.kernel,
        system::load_average(),
        env.radar_bin.display()
    );
}

fn fmt_ratios(ratios: &[f64]) -> String {
    ratios
        .iter()
        .map(|r| format!("{:.0}%", r * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn print_ingest(r: &IngestReport) {
    let p = &r.params;
    println!(
        "## Ingest, K = {} ({} readings, {} frames per monitor per run, {} messages per run, QoS {})\n",
        p.monitors,
        p.readings,
        p.frames_per_monitor(),
        p.run_messages(),
        if p.qos == QoS::AtMostOnce { 0 } else { 1 }
    );
    println!(
        "| rep | consumer | mode | observations/s | frames/s | run s | publish s | consumer CPU s | model-thread sleeps per frame | rejected | flagged | checkpoints | load 1m |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for run in &r.runs {
        println!(
            "| {} | {} | {} | {}{} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {:.2} |",
            run.rep + 1,
            run.consumer.label(),
            if run.backlog { "backlog" } else { "live" },
            stats::rate(run.observations_per_s()),
            if run.complete { "" } else { " (incomplete)" },
            stats::rate(run.frames_per_s()),
            run.elapsed.as_secs_f64(),
            run.publish_elapsed.as_secs_f64(),
            run.consumer_cpu
                .map_or("-".into(), |c| format!("{:.2}", c.as_secs_f64())),
            run.sleeps_per_frame()
                .map_or("-".into(), |s| format!("{s:.2}")),
            run.rejected,
            run.flagged,
            run.checkpoints,
            run.load_1m,
        );
    }
    println!();
    for backlog in [false, true] {
        let ratios = r.ratios(backlog);
        println!(
            "{}: radar worker {} obs/s, bare rumqttc {} obs/s (medians); ratio per repetition {} (median {:.0}%).",
            if backlog { "Backlog drain" } else { "Live" },
            stats::rate(
                r.median_rate(Consumer::Product, backlog)
                    .unwrap_or(f64::NAN)
            ),
            stats::rate(r.median_rate(Consumer::Bare, backlog).unwrap_or(f64::NAN)),
            fmt_ratios(&ratios),
            stats::median(&ratios).unwrap_or(f64::NAN) * 100.0
        );
    }
    println!(
        "Counts read every {} ms (bare: {} ms{}). Worker start to ready: {} s. One /metrics scrape: {} ms.\n",
        r.interval.as_millis(),
        r.interval.min(p.poll).as_millis(),
        if r.interval > ingest::QUIESCENCE_ABOVE {
            "; radar worker: end of its busy period from /proc, confirmed by one scrape"
        } else {
            ""
        },
        r.startups
            .iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", "),
        r.scrape.map_or("-".into(), stats::ms)
    );
}

pub(super) fn print_checkpoint(results: &[CheckpointResult]) {
    println!("## Checkpoint commits\n");
    println!(
        "| payload | monitors | radar commits/s | p50 ms | p99 ms | bare UPDATE commits/s | p50 ms | p99 ms | ratio per round (median) | load 1m |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in results {
        let (mut product, mut bare) = (r.product.clone(), r.bare.clone());
        println!(
            "| {} B | {} | {} | {} | {} | {} | {} | {} | {} ({:.0}%) | {:.2} |",
            r.payload_bytes,
            r.concurrency,
            stats::rate(product.rate()),
            stats::ms(product.quantile(0.5)),
            stats::ms(product.quantile(0.99)),
            stats::rate(bare.rate()),
            stats::ms(bare.quantile(0.5)),
            stats::ms(bare.quantile(0.99)),
            fmt_ratios(&r.round_ratios),
            stats::median(&r.round_ratios).unwrap_or(f64::NAN) * 100.0,
            r.load_1m
        );
    }
    println!();
}

pub(super) fn print_idle(r: &IdleReport) {
    let p = &r.params;
    println!(
        "## Idle worker, {} pump monitors, no data ({} s window after {} s settling)\n",
        p.monitors,
        p.window.as_secs(),
        p.settle.as_secs()
    );
    println!("| figure | measured | ceiling |");
    println!("| --- | --- | --- |");
    println!(
        "| ready after start | {:.1} s | - |",
        r.ready_after.as_secs_f64()
    );
    println!(
        "| PostgreSQL commits/s (worker's database) | {:.2} | 2 |",
        r.commits_per_s
    );
    println!(
        "| rows written/s (inserted + updated + deleted) | {:.0} | - |",
        r.rows_per_s
    );
    println!(
        "| worker CPU | {:.2}% of a core ({:.2}% per 1000 monitors) | 1% per 1000 monitors |",
        r.cpu_share * 100.0,
        r.cpu_share * 100.0 * 1000.0 / p.monitors.max(1) as f64
    );
    println!(
        "| PostgreSQL CPU (backends serving the worker) | {} | - |",
        r.db_cpu_share.map_or_else(
            || "not readable here".to_string(),
            |share| format!(
                "{:.2}% of a core ({:.2}% per 1000 monitors)",
                share * 100.0,
                share * 100.0 * 1000.0 / p.monitors.max(1) as f64
            )
        )
    );
    println!(
        "| worker RSS | {:.1} MiB ({:.1} KiB per monitor) | 100 KiB per idle monitor (at 10,000) |",
        r.rss_kib as f64 / 1024.0,
        r.rss_kib as f64 / p.monitors.max(1) as f64
    );
    println!(
        "| worker open descriptors / threads | {} / {} (open-file limit {}) | - |",
        r.holdings.fds,
        r.holdings.threads,
        r.holdings
            .fd_limit
            .map_or_else(|| "unknown".to_string(), |l| l.to_string())
    );
    println!(
        "| one /metrics scrape: size | {:.2} MB, {} lines | 1 MB (at 1000 monitors) |",
        r.scrape.bytes as f64 / 1e6,
        r.scrape.lines
    );
    println!(
        "| one /metrics scrape: worker CPU above idle (mean of {}) | {:.1} ms (wall {:.1} ms) | 20 ms (at 1000 monitors) |",
        p.scrapes,
        r.scrape.cpu.as_secs_f64() * 1000.0,
        r.scrape.wall.as_secs_f64() * 1000.0
    );
    println!(
        "\nRows written per second by table: {}. Load average before the window {}, after it {}.\n",
        r.by_table
            .iter()
            .map(|(t, rate)| format!("{t} {rate:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        r.load_before,
        r.load_after
    );
}

pub(super) fn print_recovery(r: &RecoveryReport, ingest: Option<&IngestReport>) {
    println!(
        "## Recovery and memory, {} monitors with snapshots\n",
        r.monitors
    );
    println!(
        "| start | ready after s | restored frames | idle RSS MiB | empty worker RSS MiB | load 1m |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for i in 0..r.startups.len() {
        println!(
            "| {} | {:.2} | {} | {:.1} | {:.1} | {:.2} |",
            i + 1,
            r.startups[i].as_secs_f64(),
            r.restored_processed[i],
            r.idle_rss_kib[i] as f64 / 1024.0,
            r.baseline_rss_kib
                .get(i)
                .map_or(f64::NAN, |&k| k as f64 / 1024.0),
            r.load_1m[i]
        );
    }
    if let Some(per) = r.idle_kib_per_monitor() {
        println!(
            "\nIdle RSS per monitor (median idle minus median empty, over {}): {:.1} KiB.",
            r.monitors, per
        );
    }
    if let Some(ingest) = ingest {
        let peak = ingest.runs.iter().filter_map(|run| run.peak_rss_kib).max();
        let base = stats::median(
            &r.baseline_rss_kib
                .iter()
                .map(|&k| k as f64)
                .collect::<Vec<_>>(),
        );
        if let (Some(peak), Some(base)) = (peak, base) {
            println!(
                "Under load (peak RSS during the K = {} ingest runs): {:.1} MiB, {:.1} KiB per monitor above the empty worker.",
                ingest.params.monitors,
                peak as f64 / 1024.0,
                (peak as f64 - base) / ingest.params.monitors as f64
            );
        }
    }
    println!();
}
