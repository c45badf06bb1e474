//! Reading a consumer's count until a run completes, and the moment of
//! completion interpolated between samples.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{IngestParams, deadline_for};

/// Reads a consumer's count every `interval` until it reaches the run's
/// messages (or the deadline); returns the estimated time of completion
/// and whether the run completed.
pub(super) async fn sample_until<F, Fut>(
    started: Instant,
    interval: Duration,
    p: &IngestParams,
    mut count: F,
) -> Result<(Duration, bool)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64>>,
{
    let target = p.run_messages();
    let deadline = deadline_for(p);
    let mut samples = Vec::new();
    loop {
        tokio::time::sleep(interval).await;
        let consumed = count().await?;
        samples.push((started.elapsed(), consumed));
        if let Some(at) = completion(&samples, target) {
            return Ok((at, true));
        }
        if started.elapsed() > deadline {
            return Ok((started.elapsed(), false));
        }
    }
}

/// When the count reached `target`, from `(time, count)` samples: between
/// the last sample below it and the first at it, at the rate the samples
/// before showed (a sample interval long enough to keep scrapes cheap
/// would otherwise round every run up to a whole interval).
pub fn completion(samples: &[(Duration, u64)], target: u64) -> Option<Duration> {
    let n = samples.iter().position(|&(_, c)| c >= target)?;
    let (t_n, _) = samples[n];
    if n < 2 {
        return Some(t_n);
    }
    let (t_first, c_first) = samples[0];
    let (t_last, c_last) = samples[n - 1];
    if c_last <= c_first {
        return Some(t_n);
    }
    let rate = (c_last - c_first) as f64 / (t_last - t_first).as_secs_f64();
    let rest = Duration::from_secs_f64((target - c_last) as f64 / rate);
    Some((t_last + rest).min(t_n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, count: u64) -> (Duration, u64) {
        (Duration::from_millis(ms), count)
    }

    #[test]
    fn completion_is_interpolated_at_the_rate_seen_before() {
        // 1000 per second, target reached 250 ms after the last sample below.
        let samples = [
            at(1000, 1000),
            at(2000, 2000),
            at(3000, 3000),
            at(4000, 3250),
        ];
        assert_eq!(
            completion(&samples, 3250),
            Some(Duration::from_millis(3250))
        );
        // Never later than the sample that saw it done.
        let samples = [at(1000, 100), at(2000, 200), at(3000, 1000)];
        assert_eq!(
            completion(&samples, 1000),
            Some(Duration::from_millis(3000))
        );
        // Too few samples: the sample that saw it done.
        assert_eq!(
            completion(&[at(500, 10)], 10),
            Some(Duration::from_millis(500))
        );
        assert_eq!(completion(&[at(500, 9)], 10), None);
    }
}
