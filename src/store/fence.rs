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
pub(super) struct Fence(Arc<Mutex<FenceState>>);

#[derive(Debug)]
pub(super) struct FenceState {
    pub current: FencingToken,
    /// Checkpoints sent whose commit was not confirmed (newest last).
    uncertain: Vec<FencingToken>,
    /// The checkpoint being written right now.
    in_flight: Option<FencingToken>,
    /// Bumped on every change, so a refused heartbeat can tell whether the
    /// writer moved on while it ran.
    pub generation: u64,
    pub lost: bool,
}

impl Fence {
    pub(super) fn new(current: FencingToken) -> Self {
        Self(Arc::new(Mutex::new(FenceState {
            current,
            uncertain: Vec::new(),
            in_flight: None,
            generation: 0,
            lost: false,
        })))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, FenceState> {
        // The state stays consistent across a panic elsewhere: every update
        // is a few assignments.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Signatures that prove this writer still owns the row; with
    /// `in_flight`, also the checkpoint being committed right now.
    pub(super) fn accepted(&self, in_flight: bool) -> Vec<Vec<u8>> {
        let state = self.lock();
        let mut tokens = vec![state.current.as_bytes().to_vec()];
        tokens.extend(state.uncertain.iter().map(|t| t.as_bytes().to_vec()));
        if in_flight {
            tokens.extend(state.in_flight.iter().map(|t| t.as_bytes().to_vec()));
        }
        tokens
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lock().lost
    }

    pub(super) fn begin(&self, next: &FencingToken) {
        let mut state = self.lock();
        state.in_flight = Some(next.clone());
        state.generation += 1;
    }

    pub(super) fn committed(&self, next: &FencingToken) {
        let mut state = self.lock();
        state.current = next.clone();
        state.uncertain.clear();
        state.in_flight = None;
        state.generation += 1;
    }

    pub(super) fn uncertain(&self, next: &FencingToken) {
        let mut state = self.lock();
        state.uncertain.push(next.clone());
        if state.uncertain.len() > MAX_UNCERTAIN_TOKENS {
            state.uncertain.remove(0);
        }
        state.in_flight = None;
        state.generation += 1;
    }

    pub(super) fn confirm(&self, held: &FencingToken) {
        let mut state = self.lock();
        if state.current != *held {
            state.current = held.clone();
            state.uncertain.clear();
            state.generation += 1;
        }
    }

    pub(super) fn lose(&self, service_id: Uuid, refused: WriteKind) -> OwnershipLost {
        let mut state = self.lock();
        state.lost = true;
        state.generation += 1;
        OwnershipLost {
            service_id,
            token: state.current.short(),
            refused,
            reason: super::checkpoints::LossReason::Successor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(n: u8) -> FencingToken {
        FencingToken::from_slice(&[n; 32]).unwrap()
    }

    fn accepted(fence: &Fence, in_flight: bool) -> Vec<u8> {
        fence.accepted(in_flight).iter().map(|t| t[0]).collect()
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
        assert_eq!(fence.lock().current, token(2));
        assert_eq!(accepted(&fence, false), [2]);
    }

    #[test]
    fn unconfirmed_tokens_are_bounded() {
        let fence = Fence::new(token(0));
        for n in 1..=40 {
            fence.uncertain(&token(n));
        }
        assert_eq!(fence.accepted(false).len(), 1 + MAX_UNCERTAIN_TOKENS);
    }

    #[test]
    fn every_change_moves_the_generation_so_a_racing_heartbeat_retries() {
        let fence = Fence::new(token(1));
        let before = fence.lock().generation;
        fence.begin(&token(2));
        let during = fence.lock().generation;
        fence.committed(&token(2));
        assert!(before < during && during < fence.lock().generation);
    }

    #[test]
    fn losing_marks_the_shared_fence_and_names_the_refused_write() {
        let fence = Fence::new(token(7));
        let other = fence.clone();
        let lost = fence.lose(Uuid::nil(), WriteKind::EvidenceBatch);
        assert!(other.is_lost());
        assert_eq!(lost.token, token(7).short());
        assert!(
            lost.to_string().contains("evidence batch was refused"),
            "{lost}"
        );
    }
}
