//! One worker test against three brokers that plants run: Mosquitto, a NATS
//! server with its MQTT listener (JetStream in a temp dir), and rumqttd.
//! Each: connect, 200 frames, the broker killed and started again on the
//! same port, the worker reconnects, more frames form.

use std::{
    fs,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use radar_testkit::{
    broker::Mosquitto, db, exposition::sample, http::free_port, poll, publisher::Publisher,
    telemetry::create_monitor, telemetry::now_ms, telemetry::wait_for, worker::Worker,
};

/// The three tests run one at a time: each picks free ports and releases
/// them before its broker binds, so two at once could race for one port.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Set in the child process that serves rumqttd for the test.
const RUMQTTD_PORT: &str = "RADAR_TEST_RUMQTTD_PORT";

/// A broker the test can kill and start again on the same port.
trait Restartable {
    fn port(&self) -> u16;
    fn kill(&mut self);
    fn start(&mut self);
    /// The broker's own log, for a failure message; empty when not kept.
    fn log(&self) -> String {
        String::new()
    }
}

impl Restartable for Mosquitto {
    fn port(&self) -> u16 {
        self.port
    }
    fn kill(&mut self) {
        Mosquitto::kill(self).expect("kill mosquitto");
    }
    fn start(&mut self) {
        Mosquitto::restart_blocking(self).expect("restart mosquitto");
    }
    fn log(&self) -> String {
        Mosquitto::log(self)
    }
}

/// A child process listening on `port` (NATS, or this test binary serving rumqttd).
struct ChildBroker {
    port: u16,
    command: Box<dyn Fn() -> Command>,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl ChildBroker {
    fn nats() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("nats.conf");
        fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{}\nserver_name: radar_interop\n\
                 jetstream {{ store_dir: \"{}\" }}\nmqtt {{ listen: 127.0.0.1:{port} }}\n",
                free_port(),
                dir.path().join("js").display()
            ),
        )
        .unwrap();
        Self::spawned(port, dir, move || {
            let mut cmd = Command::new("nats-server");
            cmd.arg("-c").arg(&config);
            cmd
        })
    }

    fn rumqttd() -> Self {
        let port = free_port();
        let exe: PathBuf = std::env::current_exe().unwrap();
        Self::spawned(port, tempfile::tempdir().unwrap(), move || {
            let mut cmd = Command::new(&exe);
            cmd.args(["--ignored", "--exact", "serve_rumqttd_for_the_interop_test"])
                .env(RUMQTTD_PORT, port.to_string());
            cmd
        })
    }

    fn spawned(port: u16, dir: tempfile::TempDir, command: impl Fn() -> Command + 'static) -> Self {
        let mut broker = Self {
            port,
            command: Box::new(command),
            child: None,
            _dir: dir,
        };
        broker.start();
        broker
    }
}

impl Restartable for ChildBroker {
    fn port(&self) -> u16 {
        self.port
    }
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    fn start(&mut self) {
        let child = (self.command)()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the broker process");
        self.child = Some(child);
        let port = self.port;
        wait_for(
            Duration::from_secs(20),
            "the broker accepts connections",
            || std::net::TcpStream::connect(("127.0.0.1", port)).ok(),
        );
    }
}

impl Drop for ChildBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Publishes `n` QoS 1 observations with source times 1 ms apart, all after
/// `after` (epoch ms), and waits until the broker acked each. Returns the
/// last source time used.
async fn publish(port: u16, topic: &str, n: usize, after: i64) -> i64 {
    let mut publisher = Publisher::connect(port).await;
    // Never at or below the last source time: those would be `stale`.
    let base = now_ms().max(after + 1);
    eprintln!(
        "publishing {n} from {base}: {} ms after the last source time",
        base - after
    );
    for i in 0..n {
        let value = (i % 9) as f64 + 0.5;
        publisher.raw(topic, base + i as i64, value, false).await;
    }
    publisher.flush(Duration::from_secs(30)).await;
    base + n as i64 - 1
}

fn frames(worker: &Worker, id: &str) -> f64 {
    sample(
        &worker.metrics(),
        "radar_frames_emitted_total",
        &[("monitor_id", id)],
    )
    .unwrap_or(0.0)
}

fn connected(worker: &Worker, id: &str) -> bool {
    sample(
        &worker.metrics(),
        "radar_mqtt_connected",
        &[("monitor_id", id)],
    ) == Some(1.0)
}

async fn connect_frames_restart_reconnect(name: &str, broker: &mut dyn Restartable) {
    let db = db::migrated_database(&format!("interop_{name}")).await;
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("{}/a", db::unique_name(name));
    let id = create_monitor(&db, dir.path(), name, &topic);
    let url = format!("mqtt://127.0.0.1:{}", broker.port());
    let placeholder = Mosquitto::start_anonymous();
    let worker = Worker::spawn(
        &db,
        &placeholder,
        dir.path(),
        &[&id],
        &[("RADAR_MQTT_URL", &url), ("RUST_LOG", "info,radar=debug")],
    );
    wait_for(
        Duration::from_secs(30),
        &format!("{name}: connected"),
        || connected(&worker, &id).then_some(()),
    );
    let last = publish(broker.port(), &topic, 200, 0).await;
    wait_for(
        Duration::from_secs(30),
        &format!("{name}: 200 frames"),
        || (frames(&worker, &id) >= 200.0).then_some(()),
    );

    broker.kill();
    wait_for(
        Duration::from_secs(30),
        &format!("{name}: disconnected"),
        || (!connected(&worker, &id)).then_some(()),
    );
    broker.start();
    wait_for(
        Duration::from_secs(60),
        &format!("{name}: reconnected"),
        || connected(&worker, &id).then_some(()),
    );
    // The first 200 source times ran ahead of the clock (1 ms apart,
    // published faster than that) and Mosquitto restarts in milliseconds:
    // taking `now` again could land at or below the watermark (stale).
    publish(broker.port(), &topic, 20, last).await;
    // Every one of the 20: none may be refused as stale.
    let formed = poll::within(Duration::from_secs(30)).try_blocking(
        &format!("{name}: 220 frames, every new message one"),
        || {
            let n = frames(&worker, &id);
            poll::check(n >= 220.0, || n)
        },
    );
    if let Err(timeout) = formed {
        let tail = |text: String| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(60)..].join("\n")
        };
        panic!(
            "{timeout}\n--- metrics\n{}\n--- worker log\n{}\n--- broker log\n{}",
            worker
                .metrics()
                .lines()
                .filter(|l| l.contains(&id) && (l.contains("observations") || l.contains("mqtt")))
                .collect::<Vec<_>>()
                .join("\n"),
            tail(worker.stderr()),
            tail(broker.log()),
        );
    }
    let reconnects = sample(
        &worker.metrics(),
        "radar_mqtt_reconnect_attempts_total",
        &[("monitor_id", &id)],
    );
    assert!(
        reconnects.is_some_and(|n| n >= 1.0),
        "{name}: {reconnects:?}"
    );
}

// Was intermittent and ignored (3 of about 12 runs): after the restart the
// 20 new messages were all counted `stale`. A test bug, not a radar one:
// the first 200 source times run up to 199 ms ahead of the clock, and a
// Mosquitto restart is so quick that `now` for the second batch could fall
// at or below the monitor's watermark (-33, -26 and -43 ms in the 3 failing
// of 8 runs with source times from `now` alone). The second batch now
// starts after the first one's last source time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_connects_delivers_200_frames_and_reconnects_after_a_restart() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // Every connect, subscribe and publish in the broker's log, for a failure.
    let mut broker = Mosquitto::start_with("allow_anonymous true\nlog_type all\n");
    connect_frames_restart_reconnect("mosquitto", &mut broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_server_mqtt_listener_connects_delivers_200_frames_and_reconnects_after_a_restart() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut broker = ChildBroker::nats();
    connect_frames_restart_reconnect("nats", &mut broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rumqttd_connects_delivers_200_frames_and_reconnects_after_a_restart() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut broker = ChildBroker::rumqttd();
    connect_frames_restart_reconnect("rumqttd", &mut broker).await;
}

/// Not a test: the rumqttd process of the test above (this binary run
/// again with `--ignored` and the port in the environment).
#[test]
#[ignore = "runs only as the rumqttd child of the interop test"]
fn serve_rumqttd_for_the_interop_test() {
    let Some(port) = std::env::var(RUMQTTD_PORT)
        .ok()
        .and_then(|p| p.parse().ok())
    else {
        return;
    };
    let _broker = radar_demo::start_embedded_broker_on(port).expect("start rumqttd");
    loop {
        std::thread::park();
    }
}
