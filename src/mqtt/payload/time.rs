//! Reading a source time from its JSON text: RFC 3339 text, or a number in
//! the configured epoch unit, and telling a number in another unit apart.

use chrono::{DateTime, Utc};

use super::PayloadRejection;
use crate::config::TimeUnit;

/// Epoch time scales a number may be in; `ns` is not configurable but is
/// recognised, so such a sensor is told what it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scale {
    S,
    Ms,
    Us,
    Ns,
}

/// Plausible source times: 2000-01-01 to 2100-01-01, in epoch seconds. The
/// scales are a factor 1000 apart and this window spans less than that, so
/// a number is plausible in at most one of them.
const PLAUSIBLE_SECONDS: std::ops::Range<i128> = 946_684_800..4_102_444_800;

impl Scale {
    const ALL: [Scale; 4] = [Self::S, Self::Ms, Self::Us, Self::Ns];

    pub(super) fn per_second(self) -> i128 {
        match self {
            Self::S => 1,
            Self::Ms => 1_000,
            Self::Us => 1_000_000,
            Self::Ns => 1_000_000_000,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::S => "s",
            Self::Ms => "ms",
            Self::Us => "us",
            Self::Ns => "ns",
        }
    }

    pub(super) fn of(unit: TimeUnit) -> Option<Self> {
        match unit {
            TimeUnit::Rfc3339 => None,
            TimeUnit::S => Some(Self::S),
            TimeUnit::Ms => Some(Self::Ms),
            TimeUnit::Us => Some(Self::Us),
        }
    }

    pub(super) fn fits(self, whole: i64) -> bool {
        let per = self.per_second();
        let n = i128::from(whole);
        n >= PLAUSIBLE_SECONDS.start * per && n < PLAUSIBLE_SECONDS.end * per
    }

    /// The one scale in which `whole` is a plausible epoch time.
    pub(super) fn plausible(whole: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.fits(whole))
    }
}

pub(super) fn parse_ts(raw: &str, unit: TimeUnit) -> Result<DateTime<Utc>, PayloadRejection> {
    if raw.starts_with('"') {
        let text: String = serde_json::from_str(raw).map_err(|_| PayloadRejection::BadTs)?;
        return DateTime::parse_from_rfc3339(&text)
            .map(|ts| ts.with_timezone(&Utc))
            .map_err(|_| PayloadRejection::BadTs);
    }
    let Some(scale) = Scale::of(unit) else {
        // A number where RFC 3339 text is configured is a unit mistake;
        // anything else (null, true, ...) is no timestamp at all.
        return Err(
            if raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
                PayloadRejection::TimestampUnit
            } else {
                PayloadRejection::BadTs
            },
        );
    };
    // Integer literals only (seconds may carry a decimal fraction):
    // `1.7e12` or `1700000000000.5` ms are not whole milliseconds, and
    // silently rounding them would hide a sensor bug.
    let (whole_text, fraction) = match raw.split_once('.') {
        Some((whole, fraction)) if scale == Scale::S => (whole, Some(fraction)),
        _ => (raw, None),
    };
    let whole: i64 = whole_text.parse().map_err(|_| PayloadRejection::BadTs)?;
    if !scale.fits(whole) && Scale::plausible(whole).is_some() {
        return Err(PayloadRejection::TimestampUnit);
    }
    let fraction_nanos = match fraction {
        None => 0,
        Some(digits) => {
            if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(PayloadRejection::BadTs);
            }
            let padded = format!("{digits:0<9}");
            padded
                .parse::<i128>()
                .map_err(|_| PayloadRejection::BadTs)?
        }
    };
    let per_nano = 1_000_000_000 / scale.per_second();
    let sign = if whole_text.starts_with('-') { -1 } else { 1 };
    let nanos = i128::from(whole) * per_nano + sign * fraction_nanos;
    let secs =
        i64::try_from(nanos.div_euclid(1_000_000_000)).map_err(|_| PayloadRejection::BadTs)?;
    let sub =
        u32::try_from(nanos.rem_euclid(1_000_000_000)).map_err(|_| PayloadRejection::BadTs)?;
    DateTime::from_timestamp(secs, sub).ok_or(PayloadRejection::BadTs)
}

pub(super) fn parse_value(raw: &str) -> Result<f64, PayloadRejection> {
    // serde_json validated the JSON grammar; anything not starting like a
    // number is a string, literal, array or object.
    if !raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return Err(PayloadRejection::ValueNotANumber);
    }
    // Rust's float parser rounds out-of-range literals to infinity instead
    // of failing, which is exactly the case to catch here.
    let value: f64 = raw.parse().map_err(|_| PayloadRejection::ValueNotANumber)?;
    if value.is_finite() {
        Ok(value)
    } else {
        Err(PayloadRejection::ValueNotFinite)
    }
}
