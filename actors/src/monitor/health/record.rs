//! The status record a heartbeat writes, built from the published views,
//! and the test of whether the record last written is still current, made
//! without building (or copying) a new one.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use radar::{
    coverage::CoverageHistory,
    mqtt::LinkStatus,
    snapshot::RecoveryMetadata,
    store::{HealthRecord, JsonDocument},
    telemetry::{HealthFacts, MonitorState},
};

use super::super::view::{CheckpointView, ModelView};

/// The views a record is made from, borrowed for one beat.
pub(super) struct Views<'a> {
    pub model: &'a ModelView,
    pub checkpoint: &'a CheckpointView,
    pub link: &'a LinkStatus,
}

impl Views<'_> {
    /// The error the row shows in `state`.
    fn last_error(&self, state: MonitorState) -> Option<&str> {
        match state {
            MonitorState::Disconnected | MonitorState::Starting => self.link.last_error.as_deref(),
            MonitorState::Quarantined => self.model.quarantine.as_deref(),
            MonitorState::NoData => self.model.no_data.as_deref(),
            _ => self.checkpoint.last_error.as_deref(),
        }
    }
}

/// The JSON of a model view's recovery and coverage, with the values they
/// were made from (the view shares them, so a new one is a new pointer).
#[derive(Default)]
pub(super) struct Documents {
    recovery: Option<(Arc<RecoveryMetadata>, Option<JsonDocument>)>,
    coverage: Option<(Arc<CoverageHistory>, Option<JsonDocument>)>,
}

/// `value`'s JSON, serialized again only when `value` is not the one
/// `cached` was made from.
fn reuse<T: serde::Serialize>(
    cached: &mut Option<(Arc<T>, Option<JsonDocument>)>,
    value: &Arc<T>,
) -> Option<JsonDocument> {
    match cached {
        Some((from, json)) if Arc::ptr_eq(from, value) => json.clone(),
        _ => {
            let json = JsonDocument::new(&**value).ok();
            *cached = Some((value.clone(), json.clone()));
            json
        }
    }
}

/// Whether `written` is the document `reuse` would give for `value`: false
/// whenever `value` is not the one last serialized.
fn same<T>(
    cached: &Option<(Arc<T>, Option<JsonDocument>)>,
    value: &Arc<T>,
    written: &Option<JsonDocument>,
) -> bool {
    matches!(cached, Some((from, json)) if Arc::ptr_eq(from, value) && json == written)
}

impl Documents {
    /// The record of `facts` as the views show it, taken `now`.
    pub(super) fn record(
        &mut self,
        facts: HealthFacts,
        views: &Views<'_>,
        now: DateTime<Utc>,
    ) -> HealthRecord {
        HealthRecord {
            state: facts.status_label().to_string(),
            phase: Some(views.model.phase.as_str().to_string()),
            connected: views.link.connected,
            processed_count: views.model.processed,
            last_checkpoint_at: views.checkpoint.last_commit_at,
            recovery: reuse(&mut self.recovery, &views.model.recovery),
            coverage: reuse(&mut self.coverage, &views.model.coverage),
            last_error: views.last_error(facts.state()).map(str::to_string),
            readings_seen: views.model.readings_seen.clone(),
            heartbeat_at: now,
        }
    }

    /// Whether [`Documents::record`] would now build a record equal to
    /// `written` in every field but the time it was taken: compared field
    /// by field on the views, nothing copied. A field this does not
    /// compare would be lost by a refresh-only heartbeat, so every field of
    /// [`HealthRecord`] but `heartbeat_at` is here.
    pub(super) fn unchanged(
        &self,
        written: &HealthRecord,
        facts: HealthFacts,
        views: &Views<'_>,
    ) -> bool {
        let HealthRecord {
            state: written_state,
            phase,
            connected,
            processed_count,
            last_checkpoint_at,
            recovery,
            coverage,
            last_error,
            readings_seen,
            heartbeat_at: _,
        } = written;
        written_state == facts.status_label()
            && phase.as_deref() == Some(views.model.phase.as_str())
            && *connected == views.link.connected
            && *processed_count == views.model.processed
            && *last_checkpoint_at == views.checkpoint.last_commit_at
            && last_error.as_deref() == views.last_error(facts.state())
            && *readings_seen == views.model.readings_seen
            && same(&self.recovery, &views.model.recovery, recovery)
            && same(&self.coverage, &views.model.coverage, coverage)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use radar::detector::Phase;
    use radar::telemetry::Stall;

    use super::super::super::view::Ownership;
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_790_000_000 + secs, 0).unwrap()
    }

    /// One edit of the views.
    type Change = Box<dyn Fn(&mut Inputs)>;

    #[derive(Clone)]
    struct Inputs {
        model: ModelView,
        checkpoint: CheckpointView,
        link: LinkStatus,
    }

    impl Inputs {
        fn new() -> Self {
            let mut checkpoint = CheckpointView::new(Ownership::Held);
            checkpoint.last_commit_at = Some(at(0));
            Self {
                model: ModelView {
                    phase: Phase::Monitoring,
                    processed: 7,
                    buffered: (0, 0),
                    consumed: 7,
                    suspended: false,
                    quarantine: None,
                    no_data: Some("flow: nothing since 12:00:00".into()),
                    coverage: Arc::new(CoverageHistory::default()),
                    recovery: Arc::new(RecoveryMetadata::default()),
                    readings_seen: vec![("flow".into(), Some(at(3))), ("pressure".into(), None)],
                },
                checkpoint,
                link: LinkStatus {
                    connected: true,
                    since: at(1),
                    failed_attempts: 0,
                    last_error: None,
                },
            }
        }

        fn views(&self) -> Views<'_> {
            Views {
                model: &self.model,
                checkpoint: &self.checkpoint,
                link: &self.link,
            }
        }
    }

    /// A heartbeat hands its last written record in as unchanged only while
    /// every field of it is what a new record would hold: a change to any
    /// one of them builds (and writes in full) a new record, so no new
    /// content is ever lost to a refresh-only heartbeat.
    #[test]
    fn a_written_record_is_unchanged_until_any_of_its_fields_would_change() {
        let base = Inputs::new();
        let running = HealthFacts {
            connected: true,
            was_connected: true,
            ..HealthFacts::default()
        };
        let no_data = HealthFacts {
            no_data: true,
            ..running
        };
        for state in [no_data, running] {
            let mut documents = Documents::default();
            let written = documents.record(state, &base.views(), at(10));
            assert!(documents.unchanged(&written, state, &base.views()));
            // Nothing the record does not hold makes it change.
            let mut same = base.clone();
            same.model.consumed += 5;
            same.model.buffered = (3, 1);
            same.checkpoint.commits += 1;
            same.link.since = at(9);
            assert!(documents.unchanged(&written, state, &same.views()));

            let changes: Vec<(&str, Change)> = vec![
                ("phase", Box::new(|i| i.model.phase = Phase::Training)),
                ("processed", Box::new(|i| i.model.processed += 1)),
                ("connected", Box::new(|i| i.link.connected = false)),
                (
                    "last checkpoint",
                    Box::new(|i| i.checkpoint.last_commit_at = Some(at(5))),
                ),
                (
                    "reading seen",
                    Box::new(|i| i.model.readings_seen[1].1 = Some(at(9))),
                ),
                (
                    "readings",
                    Box::new(|i| i.model.readings_seen.push(("level".into(), None))),
                ),
                (
                    "coverage",
                    Box::new(|i| {
                        let mut coverage = (*i.model.coverage).clone();
                        coverage.version += 1;
                        i.model.coverage = Arc::new(coverage);
                    }),
                ),
                (
                    "recovery, even an equal one published anew",
                    Box::new(|i| i.model.recovery = Arc::new((*i.model.recovery).clone())),
                ),
                (
                    "the error shown",
                    Box::new(move |i| match state.state() {
                        MonitorState::NoData => i.model.no_data = Some("flow: other".into()),
                        _ => i.checkpoint.last_error = Some("timed out".into()),
                    }),
                ),
            ];
            for (field, change) in &changes {
                let mut changed = base.clone();
                change(&mut changed);
                assert!(
                    !documents.unchanged(&written, state, &changed.views()),
                    "{state:?}: a new {field} was taken as unchanged"
                );
                // What a new record holds is the change (an equal recovery
                // published anew serializes the same).
                let mut fresh = Documents::default();
                let rebuilt = fresh.record(state, &changed.views(), at(10));
                if !field.starts_with("recovery") {
                    assert_ne!(rebuilt, written, "{state:?}: {field}");
                }
            }
            let other = if state == no_data {
                running
            } else {
                HealthFacts {
                    stall: Some(Stall::Input),
                    ..running
                }
            };
            assert!(
                !documents.unchanged(&written, other, &base.views()),
                "{state:?}: a new state was taken as unchanged"
            );
        }
    }
}
