use chrono::TimeDelta;

use super::*;

#[test]
fn an_empty_board_is_ready() {
    let r = Board::new().readiness();
    assert!(r.ready);
    assert_eq!(r.monitors, 0);
    assert!(r.not_ready.is_empty());
}

#[test]
fn a_held_worker_is_not_ready_until_released() {
    let board = Board::new();
    board.hold("database_unavailable", "PostgreSQL refuses connections");
    let r = board.readiness();
    assert!(!r.ready);
    assert_eq!(r.worker[0].reason, "database_unavailable");
    assert!(board.release("database_unavailable"));
    assert!(board.readiness().ready);
}

#[test]
fn readiness_lists_only_the_monitors_that_are_not_connected() {
    let board = Board::new();
    let a = board.admit(Uuid::from_u128(1), "pump");
    let _b = board.admit(Uuid::from_u128(2), "fan");
    a.condition().connect();
    let r = board.readiness();
    assert!(!r.ready);
    assert_eq!(r.monitors, 2);
    assert_eq!(r.not_ready.len(), 1);
    assert_eq!(r.not_ready[0].monitor_name, "fan");
    assert_eq!(r.not_ready[0].state, MonitorState::Starting);
}

#[test]
fn removing_the_last_unready_monitor_makes_the_worker_ready() {
    let board = Board::new();
    board.admit(Uuid::from_u128(1), "pump");
    assert!(!board.readiness().ready);
    assert!(board.remove(Uuid::from_u128(1)));
    assert!(board.readiness().ready);
    assert!(!board.remove(Uuid::from_u128(1)));
}

#[test]
fn readmitting_a_monitor_starts_it_from_a_clean_entry() {
    let board = Board::new();
    let first = board.admit(Uuid::from_u128(1), "pump");
    first.condition().connect();
    board.admit(Uuid::from_u128(1), "pump");
    assert_eq!(board.len(), 1);
    let now = Utc::now();
    let view = board.view(Uuid::from_u128(1), now).unwrap();
    assert_eq!(view.state, MonitorState::Starting);
}

#[test]
fn snapshot_age_counts_from_the_save_time_and_never_goes_negative() {
    let board = Board::new();
    let slot = board.admit(Uuid::from_u128(1), "pump");
    let now = Utc::now();
    assert_eq!(board.views(now)[0].snapshot_age, None);
    slot.figures().snapshot_saved_at = Some(now - TimeDelta::seconds(42));
    assert_eq!(
        board.views(now)[0].snapshot_age,
        Some(Duration::from_secs(42))
    );
    slot.figures().snapshot_saved_at = Some(now + TimeDelta::seconds(5));
    assert_eq!(board.views(now)[0].snapshot_age, Some(Duration::ZERO));
}

#[test]
fn the_readiness_body_names_state_and_detail_in_snake_case_json() {
    let board = Board::new();
    let slot = board.admit(Uuid::from_u128(7), "pump");
    slot.condition().connect();
    slot.condition().disconnect("connection refused");
    let json = serde_json::to_value(board.readiness()).unwrap();
    assert_eq!(json["ready"], false);
    assert_eq!(json["not_ready"][0]["state"], "disconnected");
    assert_eq!(json["not_ready"][0]["detail"], "connection refused");
    assert_eq!(
        json["not_ready"][0]["monitor_id"],
        "00000000-0000-0000-0000-000000000007"
    );
}
