//! The graph-run side of [`MonitorCore`]: building it around a compiled
//! revision (fresh or from a snapshot's graph state) and turning a graph
//! frame's report into counters, evidence and alarms like a plain monitor's.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{CoreError, Engine, MonitorCore, Step, Verdict};
use crate::{
    config::MonitorConfig,
    detector::Scored,
    graph::{CompiledGraph, FrameReport},
    runtime::graph_run::GraphRun,
    snapshot::{BoundGraph, ManagedState},
    store::EvidenceRecord,
};

impl MonitorCore {
    /// A graph run with no snapshot: the revision's nodes in their initial
    /// state (detectors start training) and a startup gap.
    pub fn fresh_graph(
        service_id: Uuid,
        config: MonitorConfig,
        graph: CompiledGraph,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let bound = bound_graph(service_id, &config, &graph)?;
        let run = GraphRun::fresh(graph, bound)
            .map_err(|reason| CoreError::Graph { service_id, reason })?;
        Self::fresh_with(service_id, config, Engine::Graph(run), now)
    }

    /// A graph run restored from its verified snapshot: the executor
    /// continues from the snapshot's graph state, which must have been
    /// computed under this revision's semantics. A snapshot taken before
    /// the first frame may carry no graph state; the graph then starts fresh.
    pub fn restore_graph(
        service_id: Uuid,
        config: MonitorConfig,
        graph: CompiledGraph,
        mut state: ManagedState,
        saved_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Self, CoreError> {
        let bound = bound_graph(service_id, &config, &graph)?;
        let run = match state.graph.take() {
            Some(checkpoint) if checkpoint.bound != bound => {
                return Err(CoreError::Graph {
                    service_id,
                    reason: "the snapshot's graph state was computed under another binding".into(),
                });
            }
            Some(checkpoint) => GraphRun::restore(graph, bound, checkpoint.state),
            None if state.counters.frames == 0 => GraphRun::fresh(graph, bound),
            None => {
                return Err(CoreError::Graph {
                    service_id,
                    reason: format!(
                        "the snapshot counts {} frames but carries no graph state",
                        state.counters.frames
                    ),
                });
            }
        }
        .map_err(|reason| CoreError::Graph { service_id, reason })?;
        Self::restore_with(service_id, config, Engine::Graph(run), state, saved_at, now)
    }

    /// A graph frame's node rejections, and its alarm sink's verdict as
    /// evidence and alarms, like a plain monitor's.
    pub(super) fn record_graph(&mut self, report: FrameReport, step: &mut Step) {
        for (node, reason) in report.rejected() {
            tracing::warn!(
                monitor_id = %self.service_id,
                node,
                reason,
                "A graph node rejected its input; its state is unchanged."
            );
        }
        let Some(sink) = report.sink else { return };
        let frame_seq = self.counters.frames + 1;
        if sink.flagged {
            self.counters.frames_flagged += 1;
        }
        self.record_alarm_event(sink.alarm_event.as_ref(), step);
        if sink.flagged {
            let scored: Vec<&Scored> = report
                .detectors
                .iter()
                .filter_map(|d| d.scored.as_deref())
                .collect();
            step.results.evidence.push(EvidenceRecord {
                frame_ts: report.ts,
                frame_seq,
                alarm_seq: self.open_alarm.map(|(seq, _)| seq),
                score: sink.score,
                threshold: sink.threshold,
                // The most significant detector of the frame.
                p_value: scored.iter().map(|s| s.p_value).fold(1.0, f64::min),
                // Each detector node's score over its own threshold.
                contributions: report
                    .detectors
                    .iter()
                    .filter_map(|d| {
                        d.scored
                            .as_ref()
                            .map(|s| (d.node.clone(), s.score / s.threshold))
                    })
                    .collect(),
            });
        }
        step.verdict = Some(Verdict {
            score: sink.score,
            flagged: sink.flagged,
            alarm_event: sink.alarm_event,
        });
    }
}

/// What a graph run's snapshots are bound to, after checking that the
/// monitor reads exactly the revision's readings with its alignment (the
/// frame's values are the graph's readings, in order).
fn bound_graph(
    service_id: Uuid,
    config: &MonitorConfig,
    graph: &CompiledGraph,
) -> Result<BoundGraph, CoreError> {
    let Some(binding) = &config.graph else {
        return Err(CoreError::Graph {
            service_id,
            reason: "the monitor is not bound to a graph run".into(),
        });
    };
    let mismatch = |what: &str| CoreError::Graph {
        service_id,
        reason: format!(
            "its {what} differ from graph {:?} revision {}; the monitor row does not match the run it is bound to",
            binding.graph, binding.revision
        ),
    };
    if binding.semantics_hash != graph.semantics_hash() {
        return Err(mismatch("executable semantics"));
    }
    if config.readings != graph.resolved_readings() {
        return Err(mismatch("readings"));
    }
    if config.alignment != graph.definition().alignment {
        return Err(mismatch("alignment settings"));
    }
    Ok(BoundGraph {
        semantics_hash: binding.semantics_hash.clone(),
        readings: config.readings.clone(),
    })
}
