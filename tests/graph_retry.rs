//! A quarantined run's failure record keeps retrying while PostgreSQL is
//! unreachable, commits once it returns, and ends on an explicit stop.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use radar::store::{self, FailureRecord, GraphStore, RetriedFailure};
use radar_testkit::{db as common, graph::*, poll};
use tokio::net::{TcpListener, TcpStream};

/// A TCP relay to PostgreSQL that can be cut (dropping every relayed
/// connection and refusing new ones) and restored.
struct Relay {
    port: u16,
    open: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    tasks: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let refused = Arc::new(AtomicUsize::new(0));
        let tasks = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (o, r, t) = (open.clone(), refused.clone(), tasks.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !AtomicBool::load(&o, Ordering::SeqCst) {
                    r.fetch_add(1, Ordering::SeqCst);
                    drop(client);
                    continue;
                }
                t.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect("127.0.0.1:5432").await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                }));
            }
        });
        Self {
            port,
            open,
            refused,
            tasks,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

/// Waits until the relay has refused at least `n` connections.
async fn refused_at_least(relay: &Relay, n: usize, what: &str) {
    poll::within(Duration::from_secs(20))
        .every(Duration::from_millis(20))
        .value(what, || relay.refused(), |&seen| seen >= n)
        .await;
}

#[tokio::test]
async fn a_quarantined_failure_record_retries_until_the_database_returns() {
    let (db, graphs, mut conn) = setup("graph_fail_retry").await;
    let run = running(&graphs, &mut conn).await;
    let relay = Relay::start().await;
    let url = db.url.replace(":5432/", &format!(":{}/", relay.port));
    assert!(
        common::server_url().ends_with(":5432"),
        "the relay forwards to the local cluster"
    );
    let through_relay = GraphStore::new(
        store::connect(&url, 1, common::STATEMENT_TIMEOUT)
            .await
            .unwrap(),
    );
    relay.cut();
    let retrying = tokio::spawn(async move {
        through_relay
            .record_failure_retrying(
                run.run_id,
                run.service_id,
                &[&TOKEN],
                &diagnostics("boom"),
                Duration::from_secs(5),
                std::future::pending(),
            )
            .await
    });
    refused_at_least(&relay, 2, "the failure record is retried").await;
    assert_eq!(
        graphs.run(run.run_id).await.unwrap().status,
        "running",
        "nothing committed while cut"
    );
    relay.restore();
    let outcome = tokio::time::timeout(Duration::from_secs(60), retrying)
        .await
        .unwrap()
        .unwrap();
    let RetriedFailure::Settled { record, attempts } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(record, FailureRecord::Recorded);
    assert!(attempts >= 3, "{attempts} attempts");
    assert_eq!(graphs.run(run.run_id).await.unwrap().status, "failed");
}

#[tokio::test]
async fn an_explicit_stop_ends_the_retries() {
    let (db, graphs, mut conn) = setup("graph_fail_retry_stop").await;
    let run = running(&graphs, &mut conn).await;
    let relay = Relay::start().await;
    let url = db.url.replace(":5432/", &format!(":{}/", relay.port));
    let through_relay = GraphStore::new(
        store::connect(&url, 1, common::STATEMENT_TIMEOUT)
            .await
            .unwrap(),
    );
    relay.cut();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let retrying = tokio::spawn(async move {
        through_relay
            .record_failure_retrying(
                run.run_id,
                run.service_id,
                &[&TOKEN],
                &diagnostics("boom"),
                Duration::from_secs(5),
                async move {
                    let _ = stop_rx.await;
                },
            )
            .await
    });
    refused_at_least(&relay, 1, "the failure record is tried").await;
    stop_tx.send(()).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), retrying)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(outcome, RetriedFailure::Stopped { .. }),
        "{outcome:?}"
    );
    assert_eq!(graphs.run(run.run_id).await.unwrap().status, "running");
}
