//! The fencing tokens one writer and its health reporter share.
//!
//! A heartbeat runs concurrently with its own writer's checkpoints, so it
//! must not take the writer's brand-new signature (committed a moment ago,
//! or being committed right now) for another owner's. Checkpoints whose
//! commit could not be confirmed (a timeout during COMMIT) stay acceptable
//! too, until one commit is confirmed.

use std::sync::{Arc, Mutex, MutexGuard};

use uuid::Uuid;

use super::checkpoints::{OwnershipLost, WriteKind};
use crate::snapshot::FencingToken;

/// Tokens a writer keeps after writes whose commit it could not confirm.
const MAX_UNCERTAIN_TOKENS: usize = 16;

/// The tokens a writer and its health reporter share, so a heartbeat never
/// mistakes this writer's own newest checkpoint for another owner's.
#[derive(Clone, Debug)]
pub(super) struct Fence(Arc<Mutex<Shared>>);

#[derive(Debug)]
struct Shared {
    /// Bumped on every change, so a refused heartbeat can tell whether the
    /// writer moved on while it ran.
    generation: u64,
    state: FenceState,
}

/// Whether the writer still owns the row. Only a held fence has tokens to
/// write with; loss is terminal.
#[derive(Debug)]
enum FenceState {
    Held {
        current: FencingToken,
        /// Checkpoints sent whose commit was not confirmed (newest last).
        uncertain: Vec<FencingToken>,
        /// The checkpoint being written right now.
        in_flight: Option<FencingToken>,
    },
    /// Another writer replaced the row; `last` is kept to name this
    /// writer's last token in messages, never to write with.
    Lost { last: FencingToken },
}

/// What a health write needs from a held fence.
#[derive(Debug)]
pub(super) struct HealthTokens {
    /// The fence's generation when the tokens were read.
    pub generation: u64,
    /// Short form of the current token, for the status row.
    pub token: String,
    /// Every signature that proves ownership, the one in flight included.
    pub accepted: Vec<Vec<u8>>,
}

impl Fence {
    pub(super) fn new(current: FencingToken) -> Self {
        Self(Arc::new(Mutex::new(Shared {
            generation: 0,
            state: FenceState::Held {
                current,
                uncertain: Vec::new(),
                in_flight: None,
            },
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // The state stays consistent across a panic elsewhere: every update
        // is a few assignments.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// The token this writer last loaded or committed (after a loss, the
    /// last one it held).
    pub(super) fn last_token(&self) -> FencingToken {
        match &self.lock().state {
            FenceState::Held { current, .. } => current.clone(),
            FenceState::Lost { last } => last.clone(),
        }
    }

    /// Signatures that prove this writer still owns the row; `None` once
    /// ownership is lost.
    pub(super) fn accepted(&self) -> Option<Vec<Vec<u8>>> {
        let shared = self.lock();
        let FenceState::Held {
            current, uncertain, ..
        } = &shared.state
        else {
            return None;
        };
        Some(owned_tokens(current, uncertain))
    }

    /// The tokens a health write checks: also the checkpoint being
    /// committed right now. `None` once ownership is lost.
    pub(super) fn for_health(&self) -> Option<HealthTokens> {
        let shared = self.lock();
        let FenceState::Held {
            current,
            uncertain,
            in_flight,
        } = &shared.state
        else {
            return None;
        };
        let mut accepted = owned_tokens(current, uncertain);
        accepted.extend(in_flight.iter().map(|t| t.as_bytes().to_vec()));
        Some(HealthTokens {
            generation: shared.generation,
            token: current.short(),
            accepted,
        })
    }

    /// Marks `next` as being written and returns the signatures its
    /// compare-and-swap accepts; `None` once ownership is lost.
    pub(super) fn begin(&self, next: &FencingToken) -> Option<Vec<Vec<u8>>> {
        let mut shared = self.lock();
        let FenceState::Held {
            current,
            uncertain,
            in_flight,
        } = &mut shared.state
        else {
            return None;
        };
        let accepted = owned_tokens(current, uncertain);
        *in_flight = Some(next.clone());
        shared.generation += 1;
        Some(accepted)
    }

    pub(super) fn committed(&self, next: &FencingToken) {
        let mut shared = self.lock();
        if let FenceState::Held {
            current,
            uncertain,
            in_flight,
        } = &mut shared.state
        {
            *current = next.clone();
            uncertain.clear();
            *in_flight = None;
            shared.generation += 1;
        }
    }

    pub(super) fn uncertain(&self, next: &FencingToken) {
        let mut shared = self.lock();
        if let FenceState::Held {
            uncertain,
            in_flight,
            ..
        } = &mut shared.state
        {
            uncertain.push(next.clone());
            if uncertain.len() > MAX_UNCERTAIN_TOKENS {
                uncertain.remove(0);
            }
            *in_flight = None;
            shared.generation += 1;
        }
    }

    pub(super) fn confirm(&self, held: &FencingToken) {
        let mut shared = self.lock();
        if let FenceState::Held {
            current, uncertain, ..
        } = &mut shared.state
            && current != held
        {
            *current = held.clone();
            uncertain.clear();
            shared.generation += 1;
        }
    }

    pub(super) fn lose(&self, service_id: Uuid, refused: WriteKind) -> OwnershipLost {
        let mut shared = self.lock();
        let last = match &shared.state {
            FenceState::Held { current, .. } => current.clone(),
            FenceState::Lost { last } => last.clone(),
        };
        let token = last.short();
        shared.state = FenceState::Lost { last };
        shared.generation += 1;
        OwnershipLost {
            service_id,
            token,
            refused,
            reason: super::checkpoints::LossReason::Successor,
        }
    }
}

fn owned_tokens(current: &FencingToken, uncertain: &[FencingToken]) -> Vec<Vec<u8>> {
    let mut tokens = vec![current.as_bytes().to_vec()];
    tokens.extend(uncertain.iter().map(|t| t.as_bytes().to_vec()));
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(n: u8) -> FencingToken {
        FencingToken::from_slice(&[n; 32]).unwrap()
    }

    fn accepted(fence: &Fence, in_flight: bool) -> Vec<u8> {
        let tokens = if in_flight {
            fence.for_health().map(|h| h.accepted)
        } else {
            fence.accepted()
        };
        tokens.unwrap_or_default().iter().map(|t| t[0]).collect()
    }

    #[test]
    fn only_the_health_path_accepts_the_checkpoint_being_written() {
        let fence = Fence::new(token(1));
        fence.begin(&token(2));
        assert_eq!(accepted(&fence, false), [1]);
        assert_eq!(accepted(&fence, true), [1, 2]);
        fence.committed(&token(2));
        assert_eq!(accepted(&fence, true), [2]);
    }

    #[test]
    fn an_unconfirmed_checkpoint_stays_acceptable_until_one_commits() {
        let fence = Fence::new(token(1));
        fence.begin(&token(2));
        fence.uncertain(&token(2));
        fence.begin(&token(3));
        fence.uncertain(&token(3));
        assert_eq!(accepted(&fence, false), [1, 2, 3]);
        fence.begin(&token(4));
        fence.committed(&token(4));
        assert_eq!(accepted(&fence, false), [4]);
    }

    #[test]
    fn a_row_showing_an_unconfirmed_checkpoint_is_adopted() {
        let fence = Fence::new(token(1));
        fence.uncertain(&token(2));
        fence.confirm(&token(2));
        assert_eq!(fence.last_token(), token(2));
        assert_eq!(accepted(&fence, false), [2]);
    }

    #[test]
    fn unconfirmed_tokens_are_bounded() {
        let fence = Fence::new(token(0));
        for n in 1..=40 {
            fence.uncertain(&token(n));
        }
        assert_eq!(accepted(&fence, false).len(), 1 + MAX_UNCERTAIN_TOKENS);
    }

    #[test]
    fn every_change_moves_the_generation_so_a_racing_heartbeat_retries() {
        let fence = Fence::new(token(1));
        let before = fence.generation();
        fence.begin(&token(2));
        let during = fence.generation();
        fence.committed(&token(2));
        assert!(before < during && during < fence.generation());
    }

    #[test]
    fn losing_marks_the_shared_fence_and_names_the_refused_write() {
        let fence = Fence::new(token(7));
        let other = fence.clone();
        let lost = fence.lose(Uuid::nil(), WriteKind::EvidenceBatch);
        assert!(other.accepted().is_none());
        assert!(other.for_health().is_none());
        assert_eq!(lost.token, token(7).short());
        assert!(
            lost.to_string().contains("evidence batch was refused"),
            "{lost}"
        );
    }

    #[test]
    fn a_lost_fence_hands_out_no_tokens_whatever_its_writer_reports_after() {
        let fence = Fence::new(token(1));
        fence.uncertain(&token(2));
        fence.lose(Uuid::nil(), WriteKind::Health);
        assert_eq!(fence.begin(&token(3)), None);
        fence.committed(&token(3));
        fence.confirm(&token(2));
        assert!(fence.accepted().is_none());
        assert!(fence.for_health().is_none());
        assert_eq!(fence.last_token(), token(1));
        let again = fence.lose(Uuid::nil(), WriteKind::Checkpoint);
        assert_eq!(again.token, token(1).short());
    }
}
