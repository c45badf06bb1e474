//! Mutations and queries of the coverage history.

use chrono::{DateTime, Utc};

use super::{CoverageHistory, Gap, GapCause, GapTotals, RestoreMark};

/// Most gaps kept in the history. A monitor with a flapping connection
/// could otherwise grow its snapshot without bound; older gaps are folded
/// into per-cause totals, so the totals stay exact while the list keeps the
/// recent detail.
pub const MAX_GAPS: usize = 256;

impl CoverageHistory {
    /// The history of a fresh monitor started at `at`: a `startup` gap,
    /// open until the first frame.
    pub fn fresh(at: DateTime<Utc>) -> Self {
        let mut history = Self::default();
        history.open_gap(GapCause::Startup, at);
        history
    }

    /// Starts a gap of `cause` at `at`. Returns whether the history changed
    /// (`false` if that cause is already in effect).
    pub fn open_gap(&mut self, cause: GapCause, at: DateTime<Utc>) -> bool {
        if self.active.contains(&cause) {
            return false;
        }
        self.backdate(cause, at);
        if self.active.is_empty() {
            self.push_gap(cause, at);
        }
        // Otherwise the open gap already covers this time under an earlier
        // cause; remember this one so the gap continues when that one ends.
        self.active.push(cause);
        self.bump()
    }

    /// Ends the gap of `cause` at `at`. Returns whether the history changed
    /// (`false` if that cause is not in effect, e.g. closed already).
    pub fn close_gap(&mut self, cause: GapCause, at: DateTime<Utc>) -> bool {
        if !self.end_cause(cause, at) {
            return false;
        }
        self.bump()
    }

    /// Records a frame with source time `ts`. The first frame ever sets
    /// `covered_from`; a frame also ends a `startup` or `restart_rollback`
    /// gap, since new observations are flowing again. Returns whether the
    /// versioned history changed (advancing `covered_to` alone does not).
    pub fn record_frame(&mut self, ts: DateTime<Utc>) -> bool {
        self.covered_to = Some(self.covered_to.map_or(ts, |to| to.max(ts)));
        let mut changed = false;
        if self.covered_from.is_none() {
            self.covered_from = Some(ts);
            changed = true;
        }
        changed |= self.end_cause(GapCause::Startup, ts);
        changed |= self.end_cause(GapCause::RestartRollback, ts);
        changed && self.bump()
    }

    /// Records that this history was restored from a snapshot saved at
    /// `saved_at`, at `now`. Input after the save was lost, so a
    /// `restart_rollback` gap opens at `saved_at` and stays open until the
    /// first new frame. Gaps the previous worker left open end at
    /// `saved_at`: it knew nothing later. A monitor still in its `startup`
    /// gap keeps that gap instead, which already explains the missing time.
    /// Always a change: the restore itself is recorded.
    pub fn record_restore(&mut self, saved_at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        let restores = self.last_restore.map_or(0, |mark| mark.restores);
        self.last_restore = Some(RestoreMark {
            saved_at,
            restored_at: now,
            restores: restores.saturating_add(1),
        });
        // The previous worker's view ends at its save: whatever it saw as
        // in effect (an outage, a stall) says nothing about later time.
        let cause = if self.active.contains(&GapCause::Startup) {
            GapCause::Startup
        } else {
            GapCause::RestartRollback
        };
        self.active.clear();
        match self.gaps.last_mut() {
            Some(gap) if gap.to.is_none() && gap.cause == cause => {}
            Some(gap) => {
                if gap.to.is_none() {
                    gap.to = Some(saved_at.max(gap.from));
                }
                self.push_gap(cause, saved_at);
            }
            None => self.push_gap(cause, saved_at),
        }
        self.active.push(cause);
        self.bump()
    }

    /// Causes currently in effect, in the order they began.
    pub fn active_causes(&self) -> &[GapCause] {
        &self.active
    }

    /// Gaps closed here that were open (or not yet there) in `earlier`, an
    /// older copy of this history: what closed in between, once each.
    pub fn closed_since<'a>(
        &'a self,
        earlier: &'a CoverageHistory,
    ) -> impl Iterator<Item = &'a Gap> {
        self.gaps.iter().filter(move |gap| {
            gap.to.is_some()
                && !earlier
                    .gaps
                    .iter()
                    .any(|e| e.to.is_some() && e.from == gap.from && e.cause == gap.cause)
        })
    }

    /// The open gap, if any.
    pub fn open(&self) -> Option<&Gap> {
        self.gaps.last().filter(|gap| gap.to.is_none())
    }

    /// The last restore from a snapshot, if any.
    pub fn last_restore(&self) -> Option<&RestoreMark> {
        self.last_restore.as_ref()
    }

    /// Totals of the gaps removed to keep the list at [`MAX_GAPS`].
    pub fn dropped(&self) -> &GapTotals {
        &self.dropped
    }

    /// The end of the newest removed gap: before it the list is incomplete.
    pub fn dropped_before(&self) -> Option<DateTime<Utc>> {
        self.dropped_before
    }

    /// Gap counts and lengths by cause over the monitor's life, removed
    /// gaps included; an open gap counts up to `now`.
    pub fn totals(&self, now: DateTime<Utc>) -> GapTotals {
        let mut totals = GapTotals::default();
        for gap in &self.gaps {
            totals.add(gap.cause, gap.to.unwrap_or(now) - gap.from);
        }
        totals.merged(&self.dropped)
    }

    /// The covered stretches between the first and newest frame: that span
    /// minus the gaps (from `dropped_before` on, when gaps were removed).
    pub fn covered_stretches(&self) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        let (Some(from), Some(to)) = (self.covered_from, self.covered_to) else {
            return Vec::new();
        };
        let mut cursor = self.dropped_before.map_or(from, |d| d.max(from));
        let mut stretches = Vec::new();
        for gap in &self.gaps {
            if gap.from > cursor {
                let end = gap.from.min(to);
                if end > cursor {
                    stretches.push((cursor, end));
                }
            }
            cursor = cursor.max(gap.to.unwrap_or(to));
        }
        if to > cursor {
            stretches.push((cursor, to));
        }
        stretches
    }

    fn bump(&mut self) -> bool {
        self.version = self.version.saturating_add(1);
        true
    }

    /// Opens a new gap at `at`, clamped to the end of the previous gap.
    /// A gap dated back to before the newest gap began (an MQTT outage is
    /// dated from its last packet, and may be noticed only after a stall
    /// gap opened, or opened and closed): the time from `at` to that gap
    /// was not watched either, so it becomes a gap of `cause` in front of
    /// it. Only when no frame was processed after `at`, and never over the
    /// gap before.
    fn backdate(&mut self, cause: GapCause, at: DateTime<Utc>) {
        let n = self.gaps.len();
        let Some(newest) = self.gaps.last() else {
            return;
        };
        let until = newest.from;
        if at >= until || self.covered_to.is_some_and(|seen| seen > at) {
            return;
        }
        let floor = n
            .checked_sub(2)
            .map(|i| self.gaps[i].to.unwrap_or(self.gaps[i].from));
        let from = floor.map_or(at, |f| at.max(f));
        if from >= until {
            return;
        }
        self.gaps.insert(
            n - 1,
            Gap {
                cause,
                from,
                to: Some(until),
            },
        );
        if self.gaps.len() > MAX_GAPS {
            let oldest = self.gaps.remove(0);
            let end = oldest.to.unwrap_or(oldest.from);
            self.dropped.add(oldest.cause, end - oldest.from);
            self.dropped_before = Some(self.dropped_before.map_or(end, |d| d.max(end)));
        }
    }

    fn push_gap(&mut self, cause: GapCause, at: DateTime<Utc>) {
        let from = match self.gaps.last() {
            Some(Gap { to: Some(end), .. }) => at.max(*end),
            Some(Gap { from, .. }) => at.max(*from),
            None => at,
        };
        self.gaps.push(Gap {
            cause,
            from,
            to: None,
        });
        if self.gaps.len() > MAX_GAPS {
            let oldest = self.gaps.remove(0);
            let end = oldest.to.unwrap_or(oldest.from);
            self.dropped.add(oldest.cause, end - oldest.from);
            self.dropped_before = Some(self.dropped_before.map_or(end, |d| d.max(end)));
        }
    }

    /// Removes `cause` from the active ones; when it owned the open gap,
    /// closes that gap at `at` and continues under the next active cause.
    /// Returns whether `cause` was active. Does not bump the version.
    fn end_cause(&mut self, cause: GapCause, at: DateTime<Utc>) -> bool {
        let Some(index) = self.active.iter().position(|&c| c == cause) else {
            return false;
        };
        self.active.remove(index);
        if index == 0 {
            let mut end = at;
            if let Some(gap) = self.gaps.last_mut() {
                end = at.max(gap.from);
                gap.to = Some(end);
            }
            if let Some(&next) = self.active.first() {
                self.push_gap(next, end);
            }
        }
        true
    }
}
