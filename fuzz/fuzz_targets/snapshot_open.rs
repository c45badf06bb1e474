//! The whole load path on arbitrary rows: envelope, signature and payload
//! cut from the input. Nothing forged may ever be restored.
#![no_main]

use libfuzzer_sys::fuzz_target;
use radar::snapshot::{CheckpointKey, LoadOutcome, SnapshotBinding, SnapshotBytes, open};
use uuid::Uuid;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (a, rest) = (data[0] as usize, &data[1..]);
    let (b, rest) = (rest[0] as usize, &rest[1..]);
    let a = a.min(rest.len());
    let (envelope, rest) = rest.split_at(a);
    let b = b.min(rest.len());
    let (signature, payload) = rest.split_at(b);
    let bytes = SnapshotBytes {
        envelope: envelope.to_vec(),
        signature: signature.to_vec(),
        payload: payload.to_vec(),
    };
    let key = CheckpointKey::new(b"fuzz-key-fuzz-key-fuzz-key-0123456789".to_vec());
    let binding = SnapshotBinding {
        service_id: Uuid::nil(),
        config_fingerprint: [0; 32],
        runtime_versions: radar::snapshot::runtime_versions(),
    };
    let outcome = open(&bytes, &binding, &key);
    assert!(!matches!(outcome, LoadOutcome::Restored(_)), "forged bytes restored");
});
