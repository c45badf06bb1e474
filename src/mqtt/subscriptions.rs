//! Which of a monitor's subscriptions the broker has acknowledged on the
//! current connection. Pure: the owner feeds it packets and acts on the
//! answers, so the SUBACK rules are testable without a broker.
//!
//! Every reading's topic is subscribed. The monitor counts as connected once
//! the topics of all required readings have a success code; an optional
//! reading's refusal is reported but does not hold back the frames, which
//! are built from required readings only.

use std::collections::{HashMap, VecDeque};

use rumqttc::SubscribeReasonCode;

/// One topic to subscribe and whether the monitor needs it to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSubscription {
    pub topic: String,
    pub required: bool,
}

/// What one SUBACK meant for the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubackOutcome {
    /// Acknowledged; nothing changes for the connection yet.
    Progress,
    /// Every required subscription now has a success code (said once per
    /// connection).
    AllAcknowledged,
    /// The broker refused a required reading's topic (return code 0x80).
    Refused { topic: String },
    /// The broker refused an optional reading's topic: worth a warning, not
    /// a reconnect.
    OptionalRefused { topic: String },
    /// A SUBACK for a packet id this connection never sent, or with the
    /// wrong number of return codes: the broker is confused.
    Unexpected { pkid: u16 },
}

/// The subscription state of one connection: requested, sent, acknowledged.
#[derive(Debug, Clone)]
pub struct Subscriptions {
    topics: Vec<TopicSubscription>,
    /// Topics requested from the client, in order, not yet seen on the wire.
    requested: VecDeque<usize>,
    /// Packet id of each SUBSCRIBE on the wire -> its topic.
    in_flight: HashMap<u16, usize>,
    acknowledged: Vec<bool>,
    /// `AllAcknowledged` was already returned on this connection.
    announced: bool,
}

impl Subscriptions {
    pub fn new(topics: Vec<TopicSubscription>) -> Self {
        let acknowledged = vec![false; topics.len()];
        Self {
            topics,
            requested: VecDeque::new(),
            in_flight: HashMap::new(),
            acknowledged,
            announced: false,
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
        self.announced = false;
        self.topics.iter().map(|t| t.topic.clone()).collect()
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
        let Some(index) = self.in_flight.remove(&pkid) else {
            return SubackOutcome::Unexpected { pkid };
        };
        let TopicSubscription { topic, required } = &self.topics[index];
        match codes {
            [SubscribeReasonCode::Success(_)] => {
                self.acknowledged[index] = true;
                if self.announce_if_complete() {
                    SubackOutcome::AllAcknowledged
                } else {
                    SubackOutcome::Progress
                }
            }
            [SubscribeReasonCode::Failure] if *required => SubackOutcome::Refused {
                topic: topic.clone(),
            },
            [SubscribeReasonCode::Failure] => SubackOutcome::OptionalRefused {
                topic: topic.clone(),
            },
            _ => SubackOutcome::Unexpected { pkid },
        }
    }

    /// True once per connection, as soon as every required topic is
    /// acknowledged; for a monitor whose frames need no SUBACK at all this
    /// is right after connecting.
    pub fn announce_if_complete(&mut self) -> bool {
        let now = self.is_complete() && !self.announced;
        self.announced |= now;
        now
    }

    /// Every required topic has a success code on this connection.
    pub fn is_complete(&self) -> bool {
        self.topics
            .iter()
            .zip(&self.acknowledged)
            .all(|(t, acked)| *acked || !t.required)
    }

    /// Required topics still without a success code, for logs and errors.
    pub fn unacknowledged(&self) -> Vec<&str> {
        self.topics
            .iter()
            .zip(&self.acknowledged)
            .filter(|(t, acked)| t.required && !**acked)
            .map(|(t, _)| t.topic.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rumqttc::QoS;

    const OK: SubscribeReasonCode = SubscribeReasonCode::Success(QoS::AtLeastOnce);
    const REFUSED: SubscribeReasonCode = SubscribeReasonCode::Failure;

    fn topic(name: &str, required: bool) -> TopicSubscription {
        TopicSubscription {
            topic: name.into(),
            required,
        }
    }

    fn two_required() -> Subscriptions {
        Subscriptions::new(vec![topic("a/t", true), topic("b/t", true)])
    }

    #[test]
    fn connected_only_after_every_required_topic_has_a_success_code() {
        let mut s = two_required();
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
        let mut s = two_required();
        s.on_connected();
        s.on_subscribe_sent(1);
        s.on_subscribe_sent(2);
        assert_eq!(s.on_suback(1, &[OK]), SubackOutcome::Progress);
        assert_eq!(
            s.on_suback(2, &[REFUSED]),
            SubackOutcome::Refused {
                topic: "b/t".into()
            }
        );
        assert!(!s.is_complete());
    }

    #[test]
    fn an_optional_topic_neither_holds_back_nor_breaks_the_connection() {
        let mut s = Subscriptions::new(vec![topic("req", true), topic("opt", false)]);
        s.on_connected();
        s.on_subscribe_sent(1);
        s.on_subscribe_sent(2);
        assert_eq!(s.on_suback(1, &[OK]), SubackOutcome::AllAcknowledged);
        assert_eq!(
            s.on_suback(2, &[REFUSED]),
            SubackOutcome::OptionalRefused {
                topic: "opt".into()
            }
        );
        assert!(s.is_complete());
    }

    #[test]
    fn all_acknowledged_is_said_once_per_connection() {
        let mut s = Subscriptions::new(vec![topic("req", true), topic("opt", false)]);
        s.on_connected();
        s.on_subscribe_sent(1);
        s.on_subscribe_sent(2);
        assert_eq!(s.on_suback(1, &[OK]), SubackOutcome::AllAcknowledged);
        assert_eq!(s.on_suback(2, &[OK]), SubackOutcome::Progress);
    }

    #[test]
    fn without_required_topics_the_connection_is_complete_at_once() {
        let mut s = Subscriptions::new(vec![topic("opt", false)]);
        s.on_connected();
        assert!(s.announce_if_complete());
        assert!(!s.announce_if_complete());
        s.on_subscribe_sent(1);
        assert_eq!(s.on_suback(1, &[OK]), SubackOutcome::Progress);
    }

    #[test]
    fn a_reconnect_forgets_every_acknowledgement() {
        let mut s = two_required();
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
        let mut s = two_required();
        s.on_connected();
        s.on_subscribe_sent(3);
        assert_eq!(s.on_suback(4, &[OK]), SubackOutcome::Unexpected { pkid: 4 });
        assert_eq!(
            s.on_suback(3, &[OK, OK]),
            SubackOutcome::Unexpected { pkid: 3 }
        );
    }

    proptest! {
        /// Whatever order the SUBACKs come in, the connection counts as
        /// complete exactly when the last required topic got its success
        /// code, and never if a required topic was refused.
        #[test]
        fn complete_exactly_when_every_required_topic_succeeded(
            order in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle(),
            required in proptest::collection::vec(any::<bool>(), 6),
            refused in proptest::option::of(0..6usize),
        ) {
            prop_assume!(required.iter().any(|r| *r));
            let topics: Vec<TopicSubscription> =
                (0..6).map(|i| topic(&format!("t/{i}"), required[i])).collect();
            let mut s = Subscriptions::new(topics.clone());
            s.on_connected();
            for pkid in 1..=6u16 {
                s.on_subscribe_sent(pkid);
            }
            let last_required = order.iter().rposition(|&i| required[i]).unwrap();
            let required_refused = refused.is_some_and(|i| required[i]);
            for (n, &i) in order.iter().enumerate() {
                let code = if refused == Some(i) { REFUSED } else { OK };
                let outcome = s.on_suback(u16::try_from(i + 1).unwrap(), &[code]);
                let name = topics[i].topic.clone();
                let expected = if refused == Some(i) && required[i] {
                    SubackOutcome::Refused { topic: name }
                } else if refused == Some(i) {
                    SubackOutcome::OptionalRefused { topic: name }
                } else if n == last_required && !required_refused {
                    SubackOutcome::AllAcknowledged
                } else {
                    SubackOutcome::Progress
                };
                prop_assert_eq!(outcome, expected);
            }
            prop_assert_eq!(s.is_complete(), !required_refused);
        }
    }
}
