//! A JSON pointer (RFC 6901) resolved over the raw text of a message: the
//! value found keeps the exact text the sensor sent, so a field behind a
//! pointer is read from its own digits, as a top-level member is. Looking
//! it up in a `serde_json::Value` instead would read every number as a
//! double first and print it again: `1764636900.123456789` seconds came
//! back as `...1234567`, and `1.7e9`, which is refused at top level as no
//! whole number of seconds, came back as `1700000000.0` and was accepted.

use std::collections::HashMap;

use serde_json::value::RawValue;

/// The raw value at `pointer` (`/a/0/b~1c`) inside `doc`, or `None` when
/// no value sits there. `doc` is valid JSON, as every `RawValue` is.
pub(super) fn resolve<'a>(doc: &'a RawValue, pointer: &str) -> Option<&'a RawValue> {
    if pointer.is_empty() {
        return Some(doc);
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .try_fold(doc, |current, token| child(current, &unescape(token)))
}

/// One reference token of a pointer as the name it stands for: `~1` is
/// `/` and `~0` is `~` (in that order, so `~01` stays `~1`).
pub(super) fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The member `token` of an object (the last one, should the name repeat,
/// as JSON parsers commonly keep it), or the element at index `token` of
/// an array; `None` for any other value.
pub(super) fn child<'a>(parent: &'a RawValue, token: &str) -> Option<&'a RawValue> {
    let text = parent.get();
    if text.starts_with('{') {
        let mut members: HashMap<String, &'a RawValue> = serde_json::from_str(text).ok()?;
        members.remove(token)
    } else if text.starts_with('[') {
        // RFC 6901: an index is `0` or digits without a leading zero.
        let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
        if !digits || (token.len() > 1 && token.starts_with('0')) {
            return None;
        }
        let elements: Vec<&'a RawValue> = serde_json::from_str(text).ok()?;
        elements.get(token.parse::<usize>().ok()?).copied()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> &RawValue {
        serde_json::from_str(text).unwrap()
    }

    fn at<'a>(doc: &'a RawValue, pointer: &str) -> Option<&'a str> {
        resolve(doc, pointer).map(RawValue::get)
    }

    #[test]
    fn a_pointer_finds_members_and_elements_with_their_text_as_sent() {
        let doc = raw(r#"{"a": {"b": [10, 1.70e9, {"c/d": 1764636900.123456789}]}, "e~f": "x"}"#);
        assert_eq!(at(doc, "/a/b/0"), Some("10"));
        assert_eq!(at(doc, "/a/b/1"), Some("1.70e9"));
        assert_eq!(at(doc, "/a/b/2/c~1d"), Some("1764636900.123456789"));
        assert_eq!(at(doc, "/e~0f"), Some(r#""x""#));
        assert_eq!(at(doc, ""), Some(doc.get()));
    }

    #[test]
    fn paths_that_lead_nowhere_find_nothing() {
        let doc = raw(r#"{"a": [1, 2], "n": null}"#);
        for pointer in [
            "/b", "/a/2", "/a/01", "/a/-1", "/a/+1", "/a/", "/n/x", "a", "/a/0/x",
        ] {
            assert_eq!(at(doc, pointer), None, "{pointer}");
        }
    }

    #[test]
    fn a_repeated_member_name_finds_the_last_one() {
        assert_eq!(at(raw(r#"{"a": 1, "a": 2}"#), "/a"), Some("2"));
    }
}
