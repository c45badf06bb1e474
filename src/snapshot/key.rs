//! The checkpoint signing key and its public short id.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Fixed label whose HMAC under the key names the key without revealing it.
const KEY_ID_LABEL: &[u8] = b"radar checkpoint key id v1";
/// Hex characters of the key id: 64 bits are plenty to tell keys apart.
const KEY_ID_HEX_LEN: usize = 16;

/// The secret that signs and verifies snapshots. Policy (length, the public
/// development key in production) is the config layer's job; this type only
/// keeps the bytes out of every `Debug` and `Display` rendering.
#[derive(Clone)]
pub struct CheckpointKey {
    secret: Vec<u8>,
}

impl CheckpointKey {
    pub fn new(secret: Vec<u8>) -> Self {
        Self { secret }
    }

    /// Number of secret bytes (for the config layer's length rule).
    pub fn len(&self) -> usize {
        self.secret.len()
    }

    pub fn is_empty(&self) -> bool {
        self.secret.is_empty()
    }

    /// A short public name of the key: an HMAC of a fixed label, so it can
    /// appear in logs, rows and metrics without helping anyone guess the key.
    pub fn key_id(&self) -> String {
        let mut mac = self.mac();
        mac.update(KEY_ID_LABEL);
        let tag = mac.finalize().into_bytes();
        let mut id = hex(&tag);
        id.truncate(KEY_ID_HEX_LEN);
        id
    }

    /// A fresh HMAC-SHA256 instance keyed with the secret.
    pub(crate) fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length (long ones are hashed first), so
        // this cannot fail; an empty key is refused by the config layer.
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC-SHA256 takes keys of any length"))
    }
}

impl fmt::Debug for CheckpointKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointKey")
            .field("key_id", &self.key_id())
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl fmt::Display for CheckpointKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "checkpoint key {}", self.key_id())
    }
}

/// Lower-case hex of some bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;

    #[test]
    fn debug_and_display_never_show_the_secret() {
        let key = CheckpointKey::new(b"super-secret-value-0123456789abcdef".to_vec());
        for text in [format!("{key:?}"), format!("{key}"), format!("{key:#?}")] {
            assert!(!text.contains("super-secret"), "{text}");
            assert!(text.contains(&key.key_id()), "{text}");
        }
    }

    #[test]
    fn key_id_is_short_stable_and_differs_between_keys() {
        let a = CheckpointKey::new(vec![7; 32]);
        let b = CheckpointKey::new(vec![8; 32]);
        assert_eq!(a.key_id().len(), 16);
        assert_eq!(a.key_id(), CheckpointKey::new(vec![7; 32]).key_id());
        assert_ne!(a.key_id(), b.key_id());
        assert!(a.key_id().chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn key_id_is_not_a_plain_hash_of_the_key() {
        let secret = vec![42u8; 32];
        let plain = hex(&Sha256::digest(&secret));
        assert!(!plain.starts_with(&CheckpointKey::new(secret).key_id()));
    }

    #[test]
    fn key_id_matches_hmac_of_the_fixed_label() {
        let key = CheckpointKey::new(b"k".repeat(32));
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&b"k".repeat(32)).unwrap();
        mac.update(b"radar checkpoint key id v1");
        let expected = hex(&mac.finalize().into_bytes());
        assert_eq!(key.key_id(), expected[..16]);
    }
}
