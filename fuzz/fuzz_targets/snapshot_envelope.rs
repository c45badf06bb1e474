//! The envelope parser on arbitrary bytes: it must refuse or read, never
//! panic, and whatever it reads must encode back to the same bytes. Each
//! input is also tried with correct check bytes appended, so the fuzzer
//! reaches the field parser behind the check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use radar::snapshot::Envelope;
use sha2::{Digest, Sha256};

fn parse(bytes: &[u8]) {
    let _ = Envelope::framed_version(bytes);
    if let Ok(envelope) = Envelope::parse(bytes) {
        assert_eq!(envelope.encode(), bytes, "parse and encode disagree");
    }
}

fuzz_target!(|data: &[u8]| {
    parse(data);
    let mut checked = data.to_vec();
    checked.extend_from_slice(&Sha256::digest(data)[..8]);
    parse(&checked);
});
