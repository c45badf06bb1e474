//! Temporary tuning harness (removed before merge).
use radar::align::Frame;
use radar::detector::{AlarmRule, Detector, DetectorSettings, Outcome};

fn env(name: &str, d: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

#[test]
#[ignore]
fn tune() {
    let root = "/work/shared/datasets/skab";
    let mut files: Vec<String> = (0..16).map(|i| format!("{root}/valve1/{i}.csv")).collect();
    files.push(format!("{root}/anomaly-free/anomaly-free.csv"));
    let settings = DetectorSettings {
        training_frames: 300,
        calibration_frames: 100,
        false_alarm_rate: env("RATE", 0.01),
        alarm: AlarmRule {
            open_k: env("K", 3.0) as usize,
            open_n: env("N", 5.0) as usize,
            close_m: env("M", 5.0) as usize,
        },
        explained_variance: env("EV", 0.9),
        score_smoothing: env("W", 1.0),
        level_tracking: if env("LW", 0.0) > 0.0 {
            Some(radar::detector::LevelTracking {
                weight: env("LW", 0.0),
                flagged_weight: env("LF", 0.0),
            })
        } else {
            None
        },
        ..Default::default()
    };
    let (mut tp, mut fp, mut tn, mut fnn) = (0u64, 0u64, 0u64, 0u64);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let mut det = Detector::new(settings.clone(), 8).unwrap();
        let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
        let mut ctp = [0.0f64; 9];
        let mut cfp = [0.0f64; 9];
        for (i, line) in text.lines().skip(1).enumerate() {
            let cols: Vec<&str> = line.trim_end().split(';').collect();
            let values: Vec<f64> = cols[1..9].iter().map(|v| v.parse().unwrap()).collect();
            let label = cols
                .get(9)
                .map(|v| v.parse::<f64>().unwrap() > 0.5)
                .unwrap_or(false);
            let out = det.process_and_fit(&Frame {
                ts: chrono::DateTime::from_timestamp(i as i64, 0).unwrap(),
                values,
            });
            if i < 400 {
                continue;
            }
            let open = match &out {
                Outcome::Scored(s) => s.alarm_open,
                _ => false,
            };
            if let Outcome::Scored(s) = &out {
                if let Some(e) = &s.evidence {
                    let slot = if label { &mut ctp } else { &mut cfp };
                    for (k, c) in e.contributions.iter().enumerate() {
                        slot[k] += c;
                    }
                    slot[8] += 1.0;
                }
            }
            match (open, label) {
                (true, true) => a += 1,
                (true, false) => b += 1,
                (false, false) => c += 1,
                (false, true) => d += 1,
            }
        }
        let f1 = a as f64 / (a as f64 + (b + d) as f64 / 2.0);
        println!(
            "{f:60} tp {a:5} fp {b:5} tn {c:5} fn {d:5} f1 {f1:.3} far {:.3}",
            b as f64 / (b + c).max(1) as f64
        );
        if std::env::var("DIAG").is_ok() {
            let f = |c: &[f64; 9]| {
                c[..8]
                    .iter()
                    .map(|x| format!("{:7.1}", x / c[8].max(1.0)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            println!(
                "   flagged-normal {}\n   flagged-anom   {}",
                f(&cfp),
                f(&ctp)
            );
        }
        tp += a;
        fp += b;
        tn += c;
        fnn += d;
    }
    let f1 = tp as f64 / (tp as f64 + (fp + fnn) as f64 / 2.0);
    println!(
        "POOLED f1 {f1:.3} far {:.3} mar {:.3}",
        fp as f64 / (fp + tn) as f64,
        fnn as f64 / (fnn + tp) as f64
    );
}
