//! The envelope parser on arbitrary bytes: it must refuse or read, never
//! panic, and whatever it reads must encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use radar::snapshot::Envelope;

fuzz_target!(|data: &[u8]| {
    let _ = Envelope::framed_version(data);
    if let Ok(envelope) = Envelope::parse(data) {
        assert_eq!(envelope.encode(), data, "parse and encode disagree");
    }
});
