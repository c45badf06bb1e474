//! Which of a monitor's subscriptions the broker has acknowledged on the
//! current connection. Pure: the owner feeds it packets and acts on the
//! answers, so the SUBACK rules are testable without a broker.

use std::collections::{HashMap, VecDeque};

use rumqttc::SubscribeReasonCode;

/// What one SUBACK meant for the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubackOutcome {
    /// Acknowledged; other subscriptions are still waiting.
    Progress,
    /// Every required subscription now has a success code.
    AllAcknowledged,
    /// The broker refused this topic (return code 0x80).
    Refused { topic: String },
    /// A SUBACK for a packet id this connection never sent, or with the
    /// wrong number of return codes: the broker is confused.
    Unexpected { pkid: u16 },
}

/// The subscription state of one connection: requested, sent, acknowledged.
#[derive(Debug, Clone)]
pub struct Subscriptions {
    topics: Vec<String>,
    /// Topics requested from the client, in order, not yet seen on the wire.
    requested: VecDeque<usize>,
    /// Packet id of each SUBSCRIBE on the wire -> its topic.
    in_flight: HashMap<u16, usize>,
    acknowledged: Vec<bool>,
}

impl Subscriptions {
    pub fn new(topics: Vec<String>) -> Self {
        let acknowledged = vec![false; topics.len()];
        Self {
            topics,
            requested: VecDeque::new(),
            in_flight: HashMap::new(),
            acknowledged,
        }
    }

    /// A new connection: nothing is acknowledged any more. Returns the topics
    /// to subscribe, in order. The worker uses clean sessions, so the broker
    /// kept nothing; even with a resumed session, subscribing again is
    /// harmless and is the only way to see fresh SUBACK codes.
    pub fn on_connected(&mut self) -> Vec<String> {
        self.requested = (0..self.topics.len()).collect();
        self.in_flight.clear();
        self.acknowledged.iter_mut().for_each(|a| *a = false);
        self.topics.clone()
    }

    /// The client put a SUBSCRIBE with this packet id on the wire. Requests
    /// leave the client's channel in order, so it is the oldest requested topic.
    pub fn on_subscribe_sent(&mut self, pkid: u16) {
        if let Some(topic) = self.requested.pop_front() {
            self.in_flight.insert(pkid, topic);
        }
    }

    /// The broker answered one SUBSCRIBE (one topic, so one return code).
    pub fn on_suback(&mut self, pkid: u16, codes: &[SubscribeReasonCode]) -> SubackOutcome {
        let Some(topic) = self.in_flight.remove(&pkid) else {
            return SubackOutcome::Unexpected { pkid };
        };
        match codes {
            [SubscribeReasonCode::Success(_)] => {
                self.acknowledged[topic] = true;
                if self.is_complete() {
                    SubackOutcome::AllAcknowledged
                } else {
                    SubackOutcome::Progress
                }
            }
            [SubscribeReasonCode::Failure] => SubackOutcome::Refused {
                topic: self.topics[topic].clone(),
            },
            _ => SubackOutcome::Unexpected { pkid },
        }
    }

    /// Every topic has a success code on this connection.
    pub fn is_complete(&self) -> bool {
        self.acknowledged.iter().all(|a| *a)
    }

    /// Topics still without a success code, for logs and errors.
    pub fn unacknowledged(&self) -> Vec<&str> {
        self.topics
            .iter()
            .zip(&self.acknowledged)
            .filter(|(_, a)| !**a)
            .map(|(t, _)| t.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::QoS;

    const OK: SubscribeReasonCode = SubscribeReasonCode::Success(QoS::AtLeastOnce);

    fn two_topics() -> Subscriptions {
        Subscriptions::new(vec!["a/t".into(), "b/t".into()])
    }

    #[test]
    fn connected_only_after_every_topic_has_a_success_code() {
        let mut s = two_topics();
        assert_eq!(s.on_connected(), ["a/t", "b/t"]);
        s.on_subscribe_sent(7);
        s.on_subscribe_sent(8);
        assert_eq!(s.on_suback(8, &[OK]), SubackOutcome::Progress);
        assert!(!s.is_complete());
        assert_eq!(s.unacknowledged(), ["a/t"]);
        assert_eq!(s.on_suback(7, &[OK]), SubackOutcome::AllAcknowledged);
        assert!(s.is_complete());
    }

    #[test]
    fn a_failure_code_names_the_refused_topic() {
        let mut s = two_topics();
        s.on_connected();
        s.on_subscribe_sent(1);
        s.on_subscribe_sent(2);
        assert_eq!(s.on_suback(1, &[OK]), SubackOutcome::Progress);
        assert_eq!(
            s.on_suback(2, &[SubscribeReasonCode::Failure]),
            SubackOutcome::Refused {
                topic: "b/t".into()
            }
        );
        assert!(!s.is_complete());
    }

    #[test]
    fn a_reconnect_forgets_every_acknowledgement() {
        let mut s = two_topics();
        s.on_connected();
        s.on_subscribe_sent(1);
        s.on_subscribe_sent(2);
        s.on_suback(1, &[OK]);
        s.on_suback(2, &[OK]);
        assert!(s.is_complete());
        assert_eq!(s.on_connected().len(), 2);
        assert!(!s.is_complete());
        assert_eq!(s.on_suback(1, &[OK]), SubackOutcome::Unexpected { pkid: 1 });
    }

    #[test]
    fn unknown_packet_ids_and_wrong_code_counts_are_unexpected() {
        let mut s = two_topics();
        s.on_connected();
        s.on_subscribe_sent(3);
        assert_eq!(s.on_suback(4, &[OK]), SubackOutcome::Unexpected { pkid: 4 });
        assert_eq!(
            s.on_suback(3, &[OK, OK]),
            SubackOutcome::Unexpected { pkid: 3 }
        );
    }

    #[test]
    fn a_monitor_without_topics_is_never_waiting() {
        let mut s = Subscriptions::new(vec![]);
        assert!(s.on_connected().is_empty());
        assert!(s.is_complete());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use rumqttc::QoS;

    proptest! {
        /// Whatever order the SUBACKs come in, the connection counts as
        /// complete exactly when the last topic got its success code, and
        /// never if any topic was refused.
        #[test]
        fn complete_exactly_when_every_topic_succeeded(
            order in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle(),
            refused in proptest::option::of(0..6usize),
        ) {
            let topics: Vec<String> = (0..6).map(|i| format!("t/{i}")).collect();
            let mut s = Subscriptions::new(topics.clone());
            s.on_connected();
            for pkid in 1..=6u16 {
                s.on_subscribe_sent(pkid);
            }
            for (n, &i) in order.iter().enumerate() {
                let code = if refused == Some(i) {
                    SubscribeReasonCode::Failure
                } else {
                    SubscribeReasonCode::Success(QoS::AtLeastOnce)
                };
                let pkid = u16::try_from(i + 1).unwrap();
                let outcome = s.on_suback(pkid, &[code]);
                if refused == Some(i) {
                    prop_assert_eq!(outcome, SubackOutcome::Refused { topic: topics[i].clone() });
                } else if n == order.len() - 1 && refused.is_none() {
                    prop_assert_eq!(outcome, SubackOutcome::AllAcknowledged);
                } else {
                    prop_assert_eq!(outcome, SubackOutcome::Progress);
                }
            }
            prop_assert_eq!(s.is_complete(), refused.is_none());
        }
    }
}
