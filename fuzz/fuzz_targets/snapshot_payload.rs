//! The payload decoder on arbitrary bytes. Workers only ever decode
//! verified bytes, but the decoder itself must still never panic, and what
//! it decodes (the detector inside included) must survive a round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use radar::snapshot::ManagedState;

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = ManagedState::decode(data) {
        let _ = state.decode_detector();
        let bytes = state.encode().expect("a decoded state encodes");
        let again = ManagedState::decode(&bytes).expect("an encoded state decodes");
        assert_eq!(again, state);
    }
});
