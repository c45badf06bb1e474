//! Whether this worker may write a monitor's rows: the one answer the
//! checkpoint side publishes and the health board reports.

/// Who may write a monitor's rows, as this worker knows it.
///
/// A monitor becomes `Held` by its first commit (the initial snapshot won,
/// or the loaded one replaced); loss is terminal. `Disabled` is a worker
/// started with database writes off, which never owns anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ownership {
    /// Database writes are disabled: nothing is read or written.
    Disabled,
    /// No snapshot won or replaced yet.
    #[default]
    Pending,
    /// This worker's first commit landed; its token fences the row.
    Held,
    /// Another worker committed a successor snapshot.
    Lost,
}

impl Ownership {
    /// After a commit of this worker: a pending claim is now held; nothing
    /// else changes (a lost or disabled monitor stays so).
    #[must_use]
    pub fn after_commit(self) -> Self {
        match self {
            Self::Pending => Self::Held,
            other => other,
        }
    }

    /// Whether this worker's token fences the row.
    pub fn is_held(self) -> bool {
        self == Self::Held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pending_claim_becomes_held_by_a_commit() {
        assert_eq!(Ownership::Pending.after_commit(), Ownership::Held);
        assert_eq!(Ownership::Held.after_commit(), Ownership::Held);
        assert_eq!(Ownership::Lost.after_commit(), Ownership::Lost);
        assert_eq!(Ownership::Disabled.after_commit(), Ownership::Disabled);
    }

    #[test]
    fn only_held_ownership_is_held() {
        let held: Vec<_> = [
            Ownership::Disabled,
            Ownership::Pending,
            Ownership::Held,
            Ownership::Lost,
        ]
        .into_iter()
        .filter(|o| o.is_held())
        .collect();
        assert_eq!(held, [Ownership::Held]);
    }
}
