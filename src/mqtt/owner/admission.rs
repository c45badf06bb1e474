//! Admitting PUBLISHes into the burst and queueing bursts into the bounded
//! ingress queue (the back-pressure point).

use std::time::Instant;

use chrono::Utc;
use rumqttc::Publish;
use tokio::sync::mpsc::error::TrySendError;
use tracing::debug;

use super::{Admission, Owner, stop_requested};
use crate::mqtt::ingress;

impl Owner {
    /// Stamps and checks one PUBLISH and adds it to the burst.
    pub(super) fn admit(&mut self, publish: Publish) {
        let (received_at, received_instant) = (Utc::now(), Instant::now());
        self.counters.received();
        match ingress::admit(
            &self.routes,
            self.options.max_payload_bytes,
            publish,
            received_at,
            received_instant,
        ) {
            Ok(message) => self.burst.push(message),
            Err(why) => {
                debug!(monitor_id = %self.options.monitor, reason = why.as_str(), "MQTT message rejected.");
                self.counters.rejected(why);
            }
        }
    }

    /// Queues the burst in order. While the queue is full the owner waits
    /// here and does not poll, so the broker stops delivering.
    pub(super) async fn queue_burst(&mut self) -> Admission {
        let mut burst = std::mem::take(&mut self.burst);
        let mut outcome = Admission::Done;
        for message in burst.drain(..) {
            match self.queue.try_send(message) {
                Ok(()) => {}
                Err(TrySendError::Closed(_)) => {
                    outcome = Admission::ConsumerGone;
                    break;
                }
                Err(TrySendError::Full(message)) => {
                    let blocked = Instant::now();
                    tokio::select! {
                        biased;
                        () = stop_requested(&mut self.stop) => {
                            outcome = Admission::StopRequested;
                            break;
                        }
                        sent = self.queue.send(message) => {
                            if sent.is_err() {
                                outcome = Admission::ConsumerGone;
                                break;
                            }
                        }
                    }
                    let micros = u64::try_from(blocked.elapsed().as_micros()).unwrap_or(u64::MAX);
                    self.counters.waited_for_queue(micros);
                }
            }
            self.count_admitted();
        }
        // Empty (the drain dropped what was not queued); its allocation
        // serves the next burst.
        self.burst = burst;
        outcome
    }

    /// At a stop: queues what fits without waiting for the model.
    pub(super) fn queue_burst_if_room(&mut self) {
        let mut burst = std::mem::take(&mut self.burst);
        for message in burst.drain(..) {
            if self.queue.try_send(message).is_err() {
                break;
            }
            self.count_admitted();
        }
    }

    /// One message entered the queue; records how full it is now.
    fn count_admitted(&self) {
        let queued = self.options.queue_capacity - self.queue.capacity();
        self.counters.admitted(queued);
    }
}
