use std::{collections::HashMap, sync::OnceLock};

use chrono::TimeZone;
use proptest::prelude::*;
use rumqttc::QoS;

use super::*;

const OK: SubscribeReasonCode = SubscribeReasonCode::Success(QoS::AtLeastOnce);
const REFUSED: SubscribeReasonCode = SubscribeReasonCode::Failure;
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The clocks `ms` milliseconds into a test.
fn at(ms: u64) -> Now {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    let wall = Utc
        .timestamp_millis_opt(1_790_000_000_000 + i64::try_from(ms).unwrap())
        .unwrap();
    Now {
        wall,
        mono: start + Duration::from_millis(ms),
    }
}

fn topic(name: &str, required: bool) -> TopicSubscription {
    TopicSubscription {
        topic: name.into(),
        required,
    }
}

/// Readings `a` and `b` are required, `c` is optional.
fn config(topics: Vec<TopicSubscription>) -> SessionConfig {
    SessionConfig {
        monitor: "m-1".into(),
        topics,
        backoff: Backoff::PRODUCTION,
        handshake_timeout: HANDSHAKE,
    }
}

fn three_topics() -> Vec<TopicSubscription> {
    vec![topic("a", true), topic("b", true), topic("c", false)]
}

type Actions = Vec<Action<u32>>;

fn start(topics: Vec<TopicSubscription>) -> Session {
    let (session, first): (Session, Actions) = Session::new(config(topics), at(0));
    assert_eq!(first, [Action::Connect { attempt: 1 }]);
    session
}

/// CONNACK, the SUBSCRIBEs queued and on the wire with packet ids 1, 2, ...
fn subscribe(s: &mut Session, ms: u64) {
    let topics = s.config.topics.len();
    let actions: Actions = s.handle(Input::ConnAck, at(ms));
    assert!(matches!(&actions[..], [Action::Subscribe { topics: t }] if t.len() == topics));
    let _: Actions = s.handle(Input::Subscribed, at(ms));
    for pkid in 1..=u16::try_from(topics).unwrap() {
        let _: Actions = s.handle(Input::SubscribeSent { pkid }, at(ms));
    }
}

fn suback(s: &mut Session, pkid: u16, code: SubscribeReasonCode, ms: u64) -> Actions {
    s.handle(
        Input::SubAck {
            pkid,
            codes: vec![code],
        },
        at(ms),
    )
}

fn live(ms: u64) -> Session {
    let mut s = start(three_topics());
    subscribe(&mut s, ms);
    suback(&mut s, 1, OK, ms);
    suback(&mut s, 2, OK, ms);
    assert!(matches!(s.state(), State::Live { .. }));
    s
}

fn retry_delay(actions: &Actions) -> Option<Duration> {
    actions.iter().find_map(|a| match a {
        Action::Report(ConnectionEvent::Retrying { retry_in, .. }) => Some(*retry_in),
        _ => None,
    })
}

fn fail(s: &mut Session, ms: u64) -> Actions {
    s.handle(
        Input::ConnectionFailed {
            reason: "connection refused".into(),
        },
        at(ms),
    )
}

#[test]
fn a_new_session_starts_its_first_attempt_at_once() {
    let s = start(three_topics());
    assert_eq!(
        s.state(),
        State::Connecting {
            attempt: 1,
            deadline: at(0).mono + HANDSHAKE
        }
    );
    assert!(s.polls());
    assert!(!s.connack_seen());
}

#[test]
fn a_connack_subscribes_to_every_topic_in_reading_order() {
    let mut s = start(three_topics());
    let actions: Actions = s.handle(Input::ConnAck, at(5));
    assert_eq!(
        actions,
        [Action::Subscribe {
            topics: vec!["a".into(), "b".into(), "c".into()]
        }]
    );
    assert!(s.connack_seen());
}

#[test]
fn connected_is_reported_only_after_every_required_suback_succeeded() {
    let mut s = start(three_topics());
    subscribe(&mut s, 5);
    assert_eq!(suback(&mut s, 1, OK, 6), []);
    assert_eq!(suback(&mut s, 3, OK, 7), []);
    assert_eq!(s.unacknowledged(), ["b"]);
    assert_eq!(
        suback(&mut s, 2, OK, 8),
        [
            Action::Count(Tally::Connected),
            Action::SetStatus {
                connected: true,
                failed_attempts: 0,
                last_error: None
            },
            Action::Report(ConnectionEvent::Connected {
                at: at(8).wall,
                attempt: 1
            }),
        ]
    );
    assert_eq!(s.state(), State::Live { attempt: 1 });
    assert_eq!(s.timer(), None);
}

#[test]
fn a_monitor_with_only_optional_readings_is_connected_once_its_subscribes_are_queued() {
    let mut s = start(vec![topic("c", false)]);
    let _: Actions = s.handle(Input::ConnAck, at(1));
    let actions: Actions = s.handle(Input::Subscribed, at(2));
    assert!(
        actions.contains(&Action::Report(ConnectionEvent::Connected {
            at: at(2).wall,
            attempt: 1
        }))
    );
}

#[test]
fn a_refused_required_subscription_drops_the_connection_and_backs_off() {
    let mut s = start(three_topics());
    subscribe(&mut s, 5);
    let actions = suback(&mut s, 2, REFUSED, 6);
    let reason = MqttError::SubscriptionRefused {
        monitor: "m-1".into(),
        topic: "b".into(),
    }
    .to_string();
    assert_eq!(
        actions,
        [
            Action::Count(Tally::SubscriptionRefused),
            Action::Report(ConnectionEvent::SubscriptionRefused {
                at: at(6).wall,
                topic: "b".into(),
                required: true
            }),
            Action::DropConnection,
            Action::QueueAdmitted,
            Action::SetStatus {
                connected: false,
                failed_attempts: 1,
                last_error: Some(reason.clone())
            },
            Action::Report(ConnectionEvent::Retrying {
                at: at(6).wall,
                next_attempt: 2,
                retry_in: Duration::from_secs(5),
                reason
            }),
        ]
    );
    assert_eq!(
        s.state(),
        State::Waiting {
            until: at(6).mono + Duration::from_secs(5),
            attempt: 2
        }
    );
    assert!(!s.polls());
}

#[test]
fn an_optional_refusal_is_reported_but_keeps_the_connection() {
    let mut s = live(5);
    let actions = suback(&mut s, 3, REFUSED, 6);
    assert_eq!(
        actions,
        [
            Action::Count(Tally::SubscriptionRefused),
            Action::Report(ConnectionEvent::SubscriptionRefused {
                at: at(6).wall,
                topic: "c".into(),
                required: false
            }),
        ]
    );
    assert_eq!(s.state(), State::Live { attempt: 1 });
}

#[test]
fn a_suback_for_no_pending_subscribe_is_ignored() {
    let mut s = live(5);
    assert_eq!(suback(&mut s, 9, OK, 6), [Action::IgnoreSuback { pkid: 9 }]);
    assert_eq!(s.state(), State::Live { attempt: 1 });
}

#[test]
fn the_handshake_timeout_ends_an_attempt_that_misses_a_suback() {
    let mut s = start(three_topics());
    subscribe(&mut s, 5);
    suback(&mut s, 1, OK, 6);
    assert_eq!(s.timer(), Some(at(0).mono + HANDSHAKE));
    let actions: Actions = s.handle(Input::TimerFired, at(10_000));
    assert_eq!(
        actions[..2],
        [Action::DropConnection, Action::QueueAdmitted]
    );
    let Some(Action::Report(ConnectionEvent::Retrying { reason, .. })) = actions.last() else {
        panic!("no retry in {actions:?}");
    };
    assert_eq!(reason, "no CONNACK or SUBACK within 10s (waiting for: b)");
}

#[test]
fn a_subscribe_the_client_would_not_take_drops_the_connection() {
    let mut s = start(three_topics());
    let _: Actions = s.handle(Input::ConnAck, at(1));
    let actions: Actions = s.handle(
        Input::SubscribeNotQueued {
            reason: "request channel full".into(),
        },
        at(2),
    );
    assert_eq!(
        actions[..2],
        [Action::DropConnection, Action::QueueAdmitted]
    );
    assert!(matches!(s.state(), State::Waiting { attempt: 2, .. }));
}

#[test]
fn losing_an_established_connection_reports_the_outage_from_the_last_packet() {
    let mut s = live(5);
    let _: Actions = s.handle(Input::OtherPacket, at(20_000));
    let actions = fail(&mut s, 50_000);
    assert_eq!(
        actions,
        [
            Action::QueueAdmitted,
            Action::SetStatus {
                connected: false,
                failed_attempts: 0,
                last_error: Some("connection refused".into())
            },
            Action::Report(ConnectionEvent::Disconnected {
                at: at(20_000).wall,
                reason: "connection refused".into()
            }),
            Action::Report(ConnectionEvent::Retrying {
                at: at(50_000).wall,
                next_attempt: 1,
                retry_in: Duration::from_secs(5),
                reason: "connection refused".into()
            }),
        ]
    );
}

#[test]
fn failed_attempts_back_off_from_five_seconds_doubling_to_five_minutes_without_limit() {
    let mut s = start(three_topics());
    let mut ms = 0;
    let mut delays = Vec::new();
    for attempt in 1..=40u32 {
        assert_eq!(s.state().attempt(), Some(attempt));
        let delay = retry_delay(&fail(&mut s, ms)).unwrap();
        delays.push(delay.as_secs());
        ms += u64::try_from(delay.as_millis()).unwrap();
        let actions: Actions = s.handle(Input::TimerFired, at(ms));
        assert_eq!(
            actions,
            [Action::Connect {
                attempt: attempt + 1
            }]
        );
    }
    assert_eq!(delays[..8], [5, 10, 20, 40, 80, 160, 300, 300]);
    assert!(delays[8..].iter().all(|d| *d == 300));
}

#[test]
fn a_new_outage_restarts_the_schedule_and_the_attempt_count() {
    let mut s = start(three_topics());
    fail(&mut s, 0);
    let _: Actions = s.handle(Input::TimerFired, at(5_000));
    fail(&mut s, 5_000);
    let _: Actions = s.handle(Input::TimerFired, at(15_000));
    subscribe(&mut s, 15_000);
    suback(&mut s, 1, OK, 15_001);
    let connected = suback(&mut s, 2, OK, 15_002);
    assert!(
        connected.contains(&Action::Report(ConnectionEvent::Connected {
            at: at(15_002).wall,
            attempt: 3
        }))
    );
    assert_eq!(
        retry_delay(&fail(&mut s, 20_000)),
        Some(Duration::from_secs(5))
    );
    let actions: Actions = s.handle(Input::TimerFired, at(25_000));
    assert_eq!(actions, [Action::Connect { attempt: 1 }]);
}

#[test]
fn messages_are_admitted_only_while_the_connection_is_up() {
    let mut s = start(three_topics());
    assert_eq!(s.handle(Input::Publish(1), at(1)), []);
    subscribe(&mut s, 2);
    suback(&mut s, 1, OK, 3);
    // A retained message of an acknowledged topic may precede the last SUBACK.
    assert_eq!(s.handle(Input::Publish(2), at(4)), [Action::Admit(2)]);
    suback(&mut s, 2, OK, 5);
    assert_eq!(s.handle(Input::Publish(3), at(6)), [Action::Admit(3)]);
    fail(&mut s, 7);
    assert_eq!(s.handle(Input::Publish(4), at(8)), []);
    let _: Actions = s.handle(Input::StopRequested, at(9));
    assert_eq!(s.handle(Input::Publish(5), at(10)), []);
}

#[test]
fn a_stop_disconnects_reports_and_ends_the_session_for_good() {
    let mut s = live(5);
    let actions: Actions = s.handle(Input::StopRequested, at(6));
    assert_eq!(
        actions,
        [
            Action::Disconnect,
            Action::SetStatus {
                connected: false,
                failed_attempts: 0,
                last_error: None
            },
            Action::Report(ConnectionEvent::Stopped { at: at(6).wall }),
        ]
    );
    assert!(s.is_stopped() && !s.polls() && s.timer().is_none());
    for input in [
        Input::TimerFired,
        Input::ConnAck,
        Input::StopRequested,
        Input::ConnectionFailed { reason: "x".into() },
    ] {
        assert_eq!(s.handle::<u32>(input, at(7)), []);
    }
}

#[test]
fn a_stop_while_waiting_ends_the_wait() {
    let mut s = start(three_topics());
    fail(&mut s, 1);
    let actions: Actions = s.handle(Input::StopRequested, at(2));
    assert_eq!(actions[0], Action::Disconnect);
    assert_eq!(s.handle::<u32>(Input::TimerFired, at(10_000)), []);
}

impl State {
    /// The attempt under way, if one is.
    fn attempt(self) -> Option<u32> {
        match self {
            State::Connecting { attempt, .. }
            | State::Subscribing { attempt, .. }
            | State::Live { attempt } => Some(attempt),
            State::Waiting { .. } | State::Stopped => None,
        }
    }
}

/// One generated input, before it gets its time.
#[derive(Debug, Clone)]
enum Step {
    ConnAck,
    Subscribed,
    NotQueued,
    Sent(u16),
    SubAck(u16, SubscribeReasonCode),
    TwoCodes(u16),
    Publish,
    Other,
    Failed,
    Timer,
    Stop,
}

fn step() -> impl Strategy<Value = (Step, u64)> {
    let code = prop_oneof![4 => Just(OK), 1 => Just(REFUSED)];
    let step = prop_oneof![
        3 => Just(Step::ConnAck),
        3 => Just(Step::Subscribed),
        1 => Just(Step::NotQueued),
        4 => (1..=4u16).prop_map(Step::Sent),
        6 => (1..=4u16, code).prop_map(|(p, c)| Step::SubAck(p, c)),
        1 => (1..=4u16).prop_map(Step::TwoCodes),
        4 => Just(Step::Publish),
        2 => Just(Step::Other),
        2 => Just(Step::Failed),
        3 => Just(Step::Timer),
        1 => Just(Step::Stop),
    ];
    (step, 0..2_000u64)
}

/// A whole handshake in one go (CONNACK, three SUBSCRIBEs on the wire, their
/// SUBACKs in any order), so that random runs often get connected.
fn handshake() -> impl Strategy<Value = Vec<(Step, u64)>> {
    let code = prop_oneof![6 => Just(OK), 1 => Just(REFUSED)];
    let order = Just(vec![1u16, 2, 3]).prop_shuffle();
    (order, proptest::collection::vec(code, 3)).prop_map(|(order, codes)| {
        let mut steps = vec![(Step::ConnAck, 1), (Step::Subscribed, 0)];
        steps.extend((1..=3).map(|pkid| (Step::Sent(pkid), 0)));
        steps.extend(
            order
                .into_iter()
                .zip(codes)
                .map(|(p, c)| (Step::SubAck(p, c), 1)),
        );
        steps
    })
}

fn steps() -> impl Strategy<Value = Vec<(Step, u64)>> {
    let chunk = prop_oneof![3 => step().prop_map(|s| vec![s]), 1 => handshake()];
    proptest::collection::vec(chunk, 1..40).prop_map(|c| c.concat())
}

/// What the test knows independently of the session, from the inputs it
/// fed and the actions it got.
#[derive(Default)]
struct Oracle {
    /// An attempt is under way (a `Connect` not yet followed by a retry).
    attempt_open: bool,
    /// The current attempt got its CONNACK.
    connack: bool,
    /// Topics subscribed on this connection, and those on the wire by pkid.
    subscribed: Vec<String>,
    on_wire: HashMap<u16, String>,
    acknowledged: Vec<String>,
    /// Established: `Connected` reported on this connection.
    live: bool,
    /// Backoff waits and failed attempts in the current outage.
    waits: u32,
    failures: u32,
    stopped: bool,
}

impl Oracle {
    fn expected_delay(&self) -> Duration {
        let mut delay = Duration::from_secs(5);
        for _ in 0..self.waits {
            delay = (delay * 2).min(Duration::from_secs(300));
        }
        delay
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the broker, the client and the clock do: `Connected` only
    /// after every required SUBACK succeeded on the current connection; one
    /// attempt at a time, numbered within its outage; the backoff follows
    /// 5 s doubling to 5 min and never gives up; messages are admitted only
    /// between a CONNACK and the connection's end; nothing after a stop.
    #[test]
    fn any_input_sequence_keeps_the_reconnect_rules(
        steps in steps(),
    ) {
        let required = ["a", "b"];
        let (mut s, first): (Session, Actions) = Session::new(config(three_topics()), at(0));
        prop_assert_eq!(first, vec![Action::Connect { attempt: 1 }]);
        let mut o = Oracle { attempt_open: true, ..Oracle::default() };
        let mut ms = 0u64;
        let mut next_message = 0u32;
        for (step, advance) in steps {
            ms += advance;
            let mut published = None;
            let input = match step {
                Step::ConnAck => Input::ConnAck,
                Step::Subscribed => Input::Subscribed,
                Step::NotQueued => Input::SubscribeNotQueued { reason: "full".into() },
                Step::Sent(pkid) => Input::SubscribeSent { pkid },
                Step::SubAck(pkid, code) => Input::SubAck { pkid, codes: vec![code] },
                Step::TwoCodes(pkid) => Input::SubAck { pkid, codes: vec![OK, OK] },
                Step::Publish => {
                    next_message += 1;
                    published = Some(next_message);
                    Input::Publish(next_message)
                }
                Step::Other => Input::OtherPacket,
                Step::Failed => Input::ConnectionFailed { reason: "reset".into() },
                Step::Timer => {
                    if let Some(t) = s.timer() {
                        ms = ms.max(u64::try_from((t - at(0).mono).as_millis()).unwrap());
                    }
                    Input::TimerFired
                }
                Step::Stop => Input::StopRequested,
            };
            let before = s.state();
            // The oracle's view of the wire, from the inputs.
            match &input {
                Input::ConnAck if matches!(before, State::Connecting { .. }) => o.connack = true,
                Input::SubscribeSent { pkid } if o.connack && !o.subscribed.is_empty() => {
                    let topic = o.subscribed.remove(0);
                    o.on_wire.insert(*pkid, topic);
                }
                Input::SubAck { pkid, codes } if o.connack => {
                    if let Some(topic) = o.on_wire.remove(pkid)
                        && codes[..] == [OK]
                    {
                        o.acknowledged.push(topic);
                    }
                }
                _ => {}
            }
            let actions: Actions = s.handle(input, at(ms));
            if o.stopped {
                prop_assert!(actions.is_empty(), "acted after the stop: {:?}", actions);
                continue;
            }
            for action in &actions {
                match action {
                    Action::Connect { attempt } => {
                        prop_assert!(!o.attempt_open, "a second attempt while one is under way");
                        prop_assert_eq!(*attempt, o.failures + 1);
                        o.attempt_open = true;
                    }
                    Action::Subscribe { topics } => {
                        prop_assert!(o.connack);
                        o.subscribed = topics.clone();
                        o.on_wire.clear();
                        o.acknowledged.clear();
                    }
                    Action::Admit(message) => {
                        prop_assert_eq!(Some(*message), published);
                        prop_assert!(o.attempt_open && o.connack, "admitted without a connection");
                    }
                    Action::Report(ConnectionEvent::Connected { attempt, .. }) => {
                        for topic in required {
                            prop_assert!(
                                o.acknowledged.iter().any(|t| t == topic),
                                "connected without a successful SUBACK for {}", topic
                            );
                        }
                        prop_assert!(o.attempt_open && !o.live);
                        prop_assert_eq!(*attempt, o.failures + 1);
                        o.live = true;
                    }
                    Action::Report(ConnectionEvent::Disconnected { .. }) => {
                        prop_assert!(o.live, "an outage reported for a connection never established");
                        o.waits = 0;
                        o.failures = 0;
                    }
                    Action::Report(ConnectionEvent::Retrying { retry_in, next_attempt, .. }) => {
                        prop_assert!(o.attempt_open);
                        if !o.live {
                            o.failures += 1;
                        }
                        prop_assert_eq!(*retry_in, o.expected_delay());
                        prop_assert_eq!(*next_attempt, o.failures + 1);
                        prop_assert_eq!(s.timer(), Some(at(ms).mono + *retry_in));
                        o.waits += 1;
                        o.attempt_open = false;
                        o.connack = false;
                        o.live = false;
                    }
                    Action::Report(ConnectionEvent::Stopped { .. }) => o.stopped = true,
                    _ => {}
                }
            }
            // Never stuck: until a stop there is always an attempt or a wait.
            prop_assert!(o.stopped || s.polls() || s.timer().is_some());
            prop_assert_eq!(o.stopped, s.is_stopped());
        }
    }
}
