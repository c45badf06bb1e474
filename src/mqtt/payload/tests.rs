use super::time::Scale;
use super::*;
use crate::align::Observation;
use crate::config::ReadingConfig;
use chrono::{SecondsFormat, TimeZone};
use proptest::prelude::*;

const LIMIT: usize = 1024;

fn parse(text: &str) -> Result<Payload, PayloadRejection> {
    parse_payload(text.as_bytes(), LIMIT)
}

#[test]
fn epoch_milliseconds_and_rfc3339_name_the_same_instant() {
    let expected = Utc.with_ymd_and_hms(2026, 11, 29, 21, 0, 0).unwrap();
    let millis = expected.timestamp_millis();
    let from_millis = parse(&format!(r#"{{"ts": {millis}, "value": 1.5}}"#)).unwrap();
    let from_text = parse(r#"{"value": 1.5, "ts": "2026-11-29T22:00:00+01:00"}"#).unwrap();
    assert_eq!(
        from_millis,
        Payload {
            ts: expected,
            value: 1.5
        }
    );
    assert_eq!(from_text, from_millis);
}

#[test]
fn integers_negative_numbers_and_exponents_are_accepted_values() {
    for (text, value) in [
        ("3", 3.0),
        ("-2.5", -2.5),
        ("1e3", 1000.0),
        ("-0", 0.0),
        ("1e-999", 0.0),
    ] {
        let payload = parse(&format!(r#"{{"ts": 0, "value": {text}}}"#)).unwrap();
        assert_eq!(payload.value, value, "{text}");
    }
}

#[test]
fn a_message_exactly_at_the_size_limit_is_parsed_and_one_byte_more_is_not() {
    let body = r#"{"ts":0,"value":1}"#;
    assert!(parse_payload(body.as_bytes(), body.len()).is_ok());
    assert_eq!(
        parse_payload(body.as_bytes(), body.len() - 1),
        Err(PayloadRejection::TooLarge)
    );
}

#[test]
fn every_payload_of_the_bad_corpus_is_rejected_for_its_reason() {
    use PayloadRejection::*;
    let huge = format!(r#"{{"ts": 0, "value": 1, "pad": "{}"}}"#, "x".repeat(LIMIT));
    let limit = 100_000;
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let deep_ts = format!(r#"{{"ts": {deep}, "value": 1}}"#);
    let deep_open = "[".repeat(5000);
    let corpus: Vec<(&[u8], PayloadRejection)> = vec![
        (huge.as_bytes(), TooLarge),
        (b"", NotJson),
        (b"   ", NotJson),
        (b"not json", NotJson),
        (b"{", NotJson),
        (br#"{"ts": 0, "value": 1"#, NotJson),
        (br#"{"ts": 0, "value": 1}}"#, NotJson),
        (br#"{"ts": 0, "value": 1} trailing"#, NotJson),
        (br#"{'ts': 0, 'value': 1}"#, NotJson),
        (br#"{"ts": 0, "value": NaN}"#, NotJson),
        (br#"{"ts": 0, "value": Infinity}"#, NotJson),
        (br#"{"ts": 0, "value": -Infinity}"#, NotJson),
        (br#"{"ts": 0, "value": +1}"#, NotJson),
        (br#"{"ts": 0, "value": 01}"#, NotJson),
        (br#"{"ts": 0, "value": 1.}"#, NotJson),
        (b"{\"ts\": 0, \"value\": \xff}", NotJson),
        (deep_open.as_bytes(), NotJson),
        (b"[]", NotAnObject),
        (deep.as_bytes(), NotAnObject),
        (br#"[{"ts": 0, "value": 1}]"#, NotAnObject),
        (b"null", NotAnObject),
        (b"true", NotAnObject),
        (b"42", NotAnObject),
        (b"-1.5", NotAnObject),
        (br#""a string""#, NotAnObject),
        (br#"{"ts": 0, "value": 1, "unit": "C"}"#, UnknownField),
        (br#"{"TS": 0, "value": 1}"#, UnknownField),
        (br#"{"ts": 0, "ts": 1, "value": 1}"#, DuplicateField),
        (br#"{"ts": 0, "value": 1, "value": 2}"#, DuplicateField),
        (b"{}", MissingTs),
        (br#"{"value": 1}"#, MissingTs),
        (br#"{"ts": 0}"#, MissingValue),
        (br#"{"ts": null, "value": 1}"#, BadTs),
        (br#"{"ts": "yesterday", "value": 1}"#, BadTs),
        (br#"{"ts": "2026-11-29", "value": 1}"#, BadTs),
        (br#"{"ts": "2026-11-29T21:00:00", "value": 1}"#, BadTs),
        (br#"{"ts": "2026-13-01T00:00:00Z", "value": 1}"#, BadTs),
        (br#"{"ts": "1700000000000", "value": 1}"#, BadTs),
        (br#"{"ts": 1700000000000.5, "value": 1}"#, BadTs),
        (br#"{"ts": 1.7e12, "value": 1}"#, BadTs),
        (br#"{"ts": 99999999999999999999, "value": 1}"#, BadTs),
        (br#"{"ts": 9223372036854775807, "value": 1}"#, BadTs),
        (br#"{"ts": true, "value": 1}"#, BadTs),
        (br#"{"ts": [0], "value": 1}"#, BadTs),
        (deep_ts.as_bytes(), BadTs),
        (br#"{"ts": 0, "value": "1.5"}"#, ValueNotANumber),
        (br#"{"ts": 0, "value": "NaN"}"#, ValueNotANumber),
        (br#"{"ts": 0, "value": "inf"}"#, ValueNotANumber),
        (br#"{"ts": 0, "value": null}"#, ValueNotANumber),
        (br#"{"ts": 0, "value": true}"#, ValueNotANumber),
        (br#"{"ts": 0, "value": [1]}"#, ValueNotANumber),
        (br#"{"ts": 0, "value": {"v": 1}}"#, ValueNotANumber),
        (br#"{"ts": 0, "value": 1e999}"#, ValueNotFinite),
        (br#"{"ts": 0, "value": -1e999}"#, ValueNotFinite),
        (
            br#"{"ts": 0, "value": 1797693134862315708145274237317043567981e270}"#,
            ValueNotFinite,
        ),
    ];
    assert!(corpus.len() >= 30);
    for (bytes, reason) in corpus {
        assert_eq!(
            parse_payload(bytes, if reason == TooLarge { LIMIT } else { limit }),
            Err(reason),
            "{}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
        );
    }
}

#[test]
fn labels_are_distinct_snake_case_and_match_serde() {
    let labels: std::collections::HashSet<_> =
        PayloadRejection::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels.len(), PayloadRejection::ALL.len());
    for reason in PayloadRejection::ALL {
        let json = serde_json::to_string(&reason).unwrap();
        assert_eq!(json, format!("\"{}\"", reason.as_str()));
    }
}

#[test]
fn topics_route_to_their_reading_index_and_others_are_unknown() {
    let reading = |name: &str, topic: &str| ReadingConfig {
        name: name.into(),
        topic: topic.into(),
        required: true,
    };
    let routes = TopicRoutes::new(&[reading("a", "plant/a"), reading("b", "plant/b")]);
    assert_eq!(routes.route("plant/b"), Ok(1));
    assert_eq!(routes.route("plant/c"), Err(PayloadRejection::UnknownTopic));
    let now = Utc.with_ymd_and_hms(2026, 11, 29, 21, 0, 0).unwrap();
    let body = br#"{"ts": 0, "value": 7}"#;
    assert_eq!(
        routes.observation("plant/b", body, LIMIT, now),
        Ok(Observation {
            reading: 1,
            ts: DateTime::UNIX_EPOCH,
            value: 7.0,
            received_at: now,
        })
    );
    assert_eq!(
        routes.observation("plant/c", b"garbage", LIMIT, now),
        Err(PayloadRejection::UnknownTopic)
    );
    assert_eq!(
        routes.observation("plant/a", b"garbage", LIMIT, now),
        Err(PayloadRejection::NotJson)
    );
}

fn format(value: &str, ts: &str, unit: TimeUnit) -> PayloadFormat {
    PayloadFormat::new(&PayloadMapping {
        value: value.into(),
        ts: ts.into(),
        ts_unit: unit,
    })
}

fn parse_as(format: &PayloadFormat, text: &str) -> Result<Payload, PayloadRejection> {
    format.parse(text.as_bytes(), LIMIT)
}

#[test]
fn every_unit_reads_its_own_numbers_as_the_same_instant() {
    let expected = Utc.with_ymd_and_hms(2026, 12, 2, 0, 55, 0).unwrap();
    let s = expected.timestamp();
    for (unit, number) in [
        (TimeUnit::S, s.to_string()),
        (TimeUnit::Ms, (s * 1_000).to_string()),
        (TimeUnit::Us, (s * 1_000_000).to_string()),
    ] {
        let body = format!(r#"{{"ts": {number}, "value": 2}}"#);
        let f = format("/value", "/ts", unit);
        assert_eq!(parse_as(&f, &body).map(|p| p.ts), Ok(expected), "{unit}");
        // RFC 3339 text names its own instant under every unit.
        let text = r#"{"ts": "2026-12-02T01:55:00+01:00", "value": 2}"#;
        assert_eq!(parse_as(&f, text).map(|p| p.ts), Ok(expected), "{unit}");
    }
    let rfc = format("/value", "/ts", TimeUnit::Rfc3339);
    let text = r#"{"ts": "2026-12-02T00:55:00Z", "value": 2}"#;
    assert_eq!(parse_as(&rfc, text).map(|p| p.ts), Ok(expected));
}

#[test]
fn epoch_seconds_may_carry_a_fraction_and_other_units_may_not() {
    let f = format("/value", "/ts", TimeUnit::S);
    let ts = parse_as(&f, r#"{"ts": 1764636900.25, "value": 1}"#)
        .unwrap()
        .ts;
    assert_eq!(ts.timestamp_millis(), 1_764_636_900_250);
    let ts = parse_as(&f, r#"{"ts": -0.5, "value": 1}"#).unwrap().ts;
    assert_eq!(ts.timestamp_millis(), -500);
    for bad in ["1764636900.1234567891", "1.7e9", "1764636900.5e0"] {
        let body = format!(r#"{{"ts": {bad}, "value": 1}}"#);
        assert_eq!(parse_as(&f, &body), Err(PayloadRejection::BadTs), "{bad}");
    }
    let ms = format("/value", "/ts", TimeUnit::Ms);
    assert_eq!(
        parse_as(&ms, r#"{"ts": 1764636900000.5, "value": 1}"#),
        Err(PayloadRejection::BadTs)
    );
}

#[test]
fn a_number_plausible_only_in_another_unit_is_a_timestamp_unit_rejection() {
    let seconds = r#"{"ts": 1764636900, "value": 1}"#;
    let millis = r#"{"ts": 1764636900000, "value": 1}"#;
    let nanos = r#"{"ts": 1764636900000000000, "value": 1}"#;
    let ms = PayloadFormat::default();
    assert_eq!(parse_as(&ms, seconds), Err(PayloadRejection::TimestampUnit));
    assert_eq!(ms.unit_hint(seconds.as_bytes()), Some("s"));
    assert_eq!(parse_as(&ms, nanos), Err(PayloadRejection::TimestampUnit));
    assert_eq!(ms.unit_hint(nanos.as_bytes()), Some("ns"));
    let s = format("/value", "/ts", TimeUnit::S);
    assert_eq!(parse_as(&s, millis), Err(PayloadRejection::TimestampUnit));
    assert_eq!(s.unit_hint(millis.as_bytes()), Some("ms"));
    let rfc = format("/value", "/ts", TimeUnit::Rfc3339);
    assert_eq!(parse_as(&rfc, millis), Err(PayloadRejection::TimestampUnit));
    assert_eq!(
        parse_as(&rfc, r#"{"ts": null, "value": 1}"#),
        Err(PayloadRejection::BadTs)
    );
    // Plausible in no unit: a 1970 date, left to alignment (too old).
    for zero_ish in ["0", "1000", "86400000"] {
        let body = format!(r#"{{"ts": {zero_ish}, "value": 1}}"#);
        assert!(parse_as(&ms, &body).is_ok(), "{zero_ish}");
    }
}

#[test]
fn top_level_pointers_keep_the_strict_shape_under_their_own_names() {
    let f = format("/v", "/time~1utc", TimeUnit::Ms);
    let ok = parse_as(&f, r#"{"time/utc": 1764636900000, "v": 3.5}"#).unwrap();
    assert_eq!(ok.value, 3.5);
    for (body, reason) in [
        (
            r#"{"time/utc": 1764636900000, "v": 3.5, "x": 1}"#,
            PayloadRejection::UnknownField,
        ),
        (
            r#"{"ts": 1764636900000, "value": 3.5}"#,
            PayloadRejection::UnknownField,
        ),
        (
            r#"{"time/utc": 1764636900000}"#,
            PayloadRejection::MissingValue,
        ),
        (
            r#"{"v": 1, "v": 2, "time/utc": 0}"#,
            PayloadRejection::DuplicateField,
        ),
    ] {
        assert_eq!(parse_as(&f, body), Err(reason), "{body}");
    }
}

#[test]
fn nested_pointers_read_their_fields_and_ignore_the_rest() {
    let f = format("/data/temperature", "/meta/time", TimeUnit::S);
    let body = r#"{"device": "p7", "data": {"temperature": 21.5, "unit": "C"}, "meta": {"time": 1764636900}}"#;
    let ok = parse_as(&f, body).unwrap();
    assert_eq!((ok.value, ok.ts.timestamp()), (21.5, 1_764_636_900));
    let arrays = format("/values/1", "/ts", TimeUnit::S);
    let ok = parse_as(&arrays, r#"{"ts": 1764636900, "values": [1, 2]}"#).unwrap();
    assert_eq!(ok.value, 2.0);
    for (body, reason) in [
        (
            r#"{"data": {}, "meta": {"time": 1764636900}}"#,
            PayloadRejection::MissingValue,
        ),
        (
            r#"{"data": {"temperature": 1}}"#,
            PayloadRejection::MissingTs,
        ),
        (
            r#"{"data": {"temperature": "1"}, "meta": {"time": 1764636900}}"#,
            PayloadRejection::ValueNotANumber,
        ),
        (
            r#"{"data": {"temperature": 1}, "meta": {"time": 1764636900000}}"#,
            PayloadRejection::TimestampUnit,
        ),
        (r#"7"#, PayloadRejection::NotAnObject),
        (r#"{"data": "#, PayloadRejection::NotJson),
    ] {
        assert_eq!(parse_as(&f, body), Err(reason), "{body}");
    }
}

#[test]
fn a_nested_field_is_read_from_its_own_text_like_a_top_level_one() {
    let top = format("/value", "/ts", TimeUnit::S);
    let nested = format("/d/v", "/m/t", TimeUnit::S);
    for ts in [
        "1764636900.123456789",
        "1764636900.25",
        "1764636900",
        "1.7e9",
        "1764636900.5e0",
        "1764636900.1234567891",
        r#""2026-12-02T01:02:03.123456789Z""#,
    ] {
        let flat = parse_as(
            &top,
            &format!(r#"{{"ts": {ts}, "value": 0.30000000000000004}}"#),
        );
        let deep = parse_as(
            &nested,
            &format!(" {{\"m\": {{ \"t\" :\n{ts} }}, \"d\": {{\"v\": 0.30000000000000004}}}} "),
        );
        assert_eq!(deep, flat, "{ts}");
    }
    let exact = parse_as(
        &nested,
        r#"{"m": {"t": 1764636900.123456789}, "d": {"v": 1}}"#,
    );
    assert_eq!(exact.unwrap().ts.timestamp_subsec_nanos(), 123_456_789);
}

proptest! {
    #[test]
    fn a_plausible_time_parses_in_its_own_unit_and_is_named_a_unit_mistake_in_any_other(
        // 2000-01-01 to 2100-01-01 in milliseconds.
        millis in 946_684_800_000i64..4_102_444_800_000,
        sent in 0usize..3,
        configured in 0usize..4,
        nested in any::<bool>(),
    ) {
        let units = [TimeUnit::S, TimeUnit::Ms, TimeUnit::Us, TimeUnit::Rfc3339];
        let number = match sent {
            0 => (millis / 1_000).to_string(),
            1 => millis.to_string(),
            _ => (millis * 1_000).to_string(),
        };
        let expected = DateTime::from_timestamp_millis(match sent {
            0 => millis / 1_000 * 1_000,
            _ => millis,
        }).unwrap();
        let (f, body) = if nested {
            (format("/v/x", "/t/x", units[configured]), format!(r#"{{"t": {{"x": {number}}}, "v": {{"x": 1}}}}"#))
        } else {
            (format("/value", "/ts", units[configured]), format!(r#"{{"ts": {number}, "value": 1}}"#))
        };
        let parsed = parse_as(&f, &body).map(|p| p.ts);
        if configured == sent {
            prop_assert_eq!(parsed, Ok(expected));
        } else {
            prop_assert_eq!(parsed, Err(PayloadRejection::TimestampUnit));
        }
    }

    #[test]
    fn a_nested_value_reads_the_same_number_as_a_top_level_one(
        value in any::<f64>().prop_filter("finite", |v| v.is_finite()),
        digits in 15usize..20,
    ) {
        // Sensors print more digits than the shortest round trip; every
        // digit string must still read as the nearest double, whether
        // the field is top level or behind a pointer.
        let text = format!("{value:.digits$e}");
        let expected: f64 = text.parse().unwrap();
        let top = parse(&format!(r#"{{"ts": 1764636900000, "value": {text}}}"#)).map(|p| p.value.to_bits());
        let nested = parse_as(
            &format("/data/x", "/ts", TimeUnit::Ms),
            &format!(r#"{{"ts": 1764636900000, "data": {{"x": {text}}}}}"#),
        ).map(|p| p.value.to_bits());
        prop_assert_eq!(top, Ok(expected.to_bits()), "{}", text);
        prop_assert_eq!(nested, Ok(expected.to_bits()), "{}", text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_payload(&bytes, 128);
    }

    #[test]
    fn arbitrary_json_like_text_never_panics(text in r#"[{}\[\]":,0-9a-z.eE+\- ]{0,64}"#) {
        let _ = parse_payload(text.as_bytes(), LIMIT);
    }

    #[test]
    fn valid_payloads_roundtrip(
        millis in (-62_000_000_000_000i64..250_000_000_000_000)
            .prop_filter("not plausible epoch seconds", |ms| Scale::plausible(*ms).is_none()),
        nanos in 0u32..1_000_000,
        value in any::<f64>().prop_filter("finite", |v| v.is_finite()),
        as_text in any::<bool>(),
        value_first in any::<bool>(),
    ) {
        let whole_ms = DateTime::from_timestamp_millis(millis).unwrap();
        let (ts, ts_json) = if as_text {
            let ts = whole_ms + chrono::TimeDelta::nanoseconds(i64::from(nanos));
            (ts, serde_json::to_string(&ts.to_rfc3339_opts(SecondsFormat::AutoSi, true)).unwrap())
        } else {
            (whole_ms, millis.to_string())
        };
        let value_json = serde_json::to_string(&value).unwrap();
        let body = if value_first {
            format!(r#"{{"value":{value_json},"ts":{ts_json}}}"#)
        } else {
            format!(r#"{{"ts":{ts_json},"value":{value_json}}}"#)
        };
        prop_assert_eq!(parse(&body), Ok(Payload { ts, value }));
    }
}
