# The six checks of scripts/fleet-test. Sourced after the stack is deployed;
# each check returns non-zero and logs why when the fleet does not do what
# deploy/README.md promises.

why() { log "  $*"; }

# "TASK SLOT STATE CONTAINER" of the worker service's tasks meant to run.
running_tasks() {
  local task
  for task in $("$DOCKER" service ps "$WORKER_SERVICE" --no-trunc -q --filter desired-state=running); do
    "$DOCKER" inspect -f '{{.ID}} {{.Slot}} {{.Status.State}} {{.Status.ContainerStatus.ContainerID}}' "$task"
  done
}

container_env() { # container_env CONTAINER NAME
  "$DOCKER" inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$1" | sed -n "s/^$2=//p"
}

worker_containers() {
  "$DOCKER" ps -q --no-trunc --filter "label=com.docker.swarm.service.name=$WORKER_SERVICE"
}

# Worker ids (RADAR_WORKER_ID of the stack) of the running tasks.
worker_ids() { running_tasks | awk '{ print "radar-" $2 "-" $1 }'; }

remember_generation() { # remember_generation NAME: stores the running worker ids
  local w
  for w in $(worker_ids); do sql "INSERT INTO fleet_generation VALUES ('$1', '$w')" >/dev/null; done
}

show_status() {
  sql "SELECT s.name, o.state, o.worker_id, o.processed_count, now() - o.heartbeat_at
       FROM services s LEFT JOIN radar_operational_status o ON o.service_id = s.id ORDER BY s.name" |
    while read -r line; do why "$line"; done
  "$DOCKER" service ps "$WORKER_SERVICE" --format '{{.Name}} {{.Image}} {{.CurrentState}} {{.Error}}' |
    head -n 20 | while read -r line; do why "$line"; done
}

# Every monitor connected, on a fresh heartbeat, owned by a running task; each
# of the N tasks healthy and on shard SLOT/N; exactly one task's /metrics
# shows each monitor connected; no other worker container runs.
owned_once() {
  local n=$1 tasks task slot state cid addr id owners ids=()
  tasks=$(running_tasks)
  [[ $(grep -c . <<<"$tasks") -eq $n ]] || return 1
  [[ $(worker_containers | grep -c .) -eq $n ]] || return 1
  rm -f "$WORK"/metrics.*
  while read -r task slot state cid; do
    [[ "$state" == running ]] || return 1
    [[ "$("$DOCKER" inspect -f '{{.State.Health.Status}}' "$cid")" == healthy ]] || return 1
    [[ "$(container_env "$cid" RADAR_SHARD)" == "$slot/$n" ]] || return 1
    addr=$(container_env "$cid" RADAR_METRICS_ADDR)
    curl -fsS --max-time 5 "http://$addr/metrics" >"$WORK/metrics.$task" || return 1
    ids+=("'radar-$slot-$task'")
  done <<<"$tasks"
  for id in $MONITOR_IDS; do
    owners=$(grep -lE "^radar_monitor_state\{[^}]*monitor_id=\"$id\"[^}]*state=\"connected\"[^}]*\} 1\$" "$WORK"/metrics.* | grep -c .)
    ((owners == 1)) || return 1
  done
  local ok
  ok=$(sql "SELECT count(*) FROM radar_operational_status
            WHERE state = 'running' AND connected AND heartbeat_at > now() - interval '10 seconds'
              AND worker_id IN ($(
    IFS=,
    echo "${ids[*]}"
  ))")
  ((ok == MONITORS))
}

processed_snapshot() { sql "SELECT service_id || ' ' || processed_count FROM radar_operational_status ORDER BY 1"; }

# Every monitor's processed count above the one in FILE.
processing_beyond() {
  local id count before
  while read -r id count; do
    before=$(awk -v id="$id" '$1 == id { print $2 }' "$1")
    [[ -n "$before" ]] && ((count > before)) || return 1
  done < <(processed_snapshot)
}

check_owned_once() {
  local n=$1
  if ! wait_for 300 "every monitor connected and owned by exactly one of $n healthy tasks" owned_once "$n"; then
    show_status
    return 1
  fi
  processed_snapshot >"$WORK/processed"
  [[ $(grep -c . "$WORK/processed") -eq $MONITORS ]] || { why "not every monitor has a status row"; return 1; }
  wait_for 60 "every monitor to process new frames" processing_beyond "$WORK/processed" || { show_status; return 1; }
}

update_state() { "$DOCKER" service inspect -f '{{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}' "$WORKER_SERVICE"; }
update_settled() { [[ "$(update_state)" =~ ^(completed|paused|rollback_completed|rollback_paused)$ ]]; }
wait_update() {
  wait_for 900 "the rolling update of $WORKER_SERVICE" update_settled || return 1
  [[ "$(update_state)" == completed ]] || { why "the update ended $(update_state)"; show_status; return 1; }
}

check_update() {
  remember_generation before-update
  log "  docker service update --image radar:fleet-b (start-first, one task at a time)"
  "$DOCKER" service update --detach --no-resolve-image --image radar:fleet-b "$WORKER_SERVICE" >/dev/null
  wait_update || return 1
  check_owned_once 3 || return 1
  remember_generation after-update
  local images
  images=$("$DOCKER" service ps "$WORKER_SERVICE" --filter desired-state=running --format '{{.Image}}' | sort -u)
  [[ "$images" == radar:fleet-b ]] || { why "running images: $images"; return 1; }
  # Each monitor's successor committed; after that commit, no checkpoint,
  # evidence or alarm write came from the task it superseded, and no status
  # write whose transaction began after it. A status write checks the
  # token with a plain read, without the snapshot row lock (spec: status is
  # a health projection on the statement's database snapshot, not a
  # serializable ownership record), so one that began before the commit
  # may end just after it; one that began after it read the successor's
  # signature and must have been refused.
  local succeeded late
  succeeded=$(sql "SELECT count(DISTINCT service_id) FROM fleet_write_audit
                   WHERE tbl = 'checkpoint' AND writer IN (SELECT worker FROM fleet_generation WHERE name = 'after-update')")
  ((succeeded == MONITORS)) || { why "$succeeded of $MONITORS monitors have a commit by the new tasks"; return 1; }
  late=$(sql "WITH successor AS (
                SELECT service_id, min(at) AS first_commit FROM fleet_write_audit
                WHERE tbl = 'checkpoint' AND writer IN (SELECT worker FROM fleet_generation WHERE name = 'after-update')
                GROUP BY service_id),
              writes AS (
                SELECT a.tbl, a.service_id, a.at, a.began,
                       coalesce(a.writer, (SELECT c.writer FROM fleet_write_audit c
                                           WHERE c.tbl = 'checkpoint' AND c.signature = a.signature LIMIT 1)) AS writer
                FROM fleet_write_audit a)
              SELECT w.tbl || ' of ' || w.service_id || ' by ' || w.writer || ' at +' || (w.at - s.first_commit)
                     || ', its transaction begun at ' || (w.began - s.first_commit)
              FROM writes w JOIN successor s USING (service_id)
              WHERE CASE WHEN w.tbl = 'status' THEN w.began > s.first_commit ELSE w.at > s.first_commit END
                AND w.writer IN (SELECT worker FROM fleet_generation WHERE name = 'before-update')")
  # The check has something to see: the old and new task of a slot overlap,
  # and the old one kept writing until its successor's first commit.
  why "$(sql "WITH successor AS (
                SELECT service_id, min(at) AS first_commit FROM fleet_write_audit
                WHERE tbl = 'checkpoint' AND writer IN (SELECT worker FROM fleet_generation WHERE name = 'after-update')
                GROUP BY service_id)
              SELECT count(*) || ' writes by superseded tasks in the 10 s before their successor''s first commit, '
                     || count(*) FILTER (WHERE a.tbl = 'status') || ' of them heartbeats'
              FROM fleet_write_audit a JOIN successor s USING (service_id)
              WHERE a.writer IN (SELECT worker FROM fleet_generation WHERE name = 'before-update')
                AND a.at BETWEEN s.first_commit - interval '10 seconds' AND s.first_commit")"
  if [[ -n "$late" ]]; then
    why "writes by superseded tasks after their successor's first commit:"
    while read -r line; do why "$line"; done <<<"$late"
    return 1
  fi
  # The restart gap: every monitor's coverage history shows the gap from
  # the restored snapshot to its first new frame (cause restart_rollback).
  local gaps
  gaps="EXISTS (SELECT 1 FROM jsonb_array_elements(coverage -> 'gaps') g
                WHERE g ->> 'cause' = 'restart_rollback' AND g ->> 'to' IS NOT NULL)"
  sql "SELECT 'restart gap of ' || service_id || ': ' || (
         SELECT g::text FROM jsonb_array_elements(coverage -> 'gaps') g
         WHERE g ->> 'cause' = 'restart_rollback' ORDER BY g ->> 'from' DESC LIMIT 1)
       FROM radar_operational_status ORDER BY 1" | while read -r line; do why "$line"; done
  gaps=$(sql "SELECT count(*) FROM radar_operational_status WHERE $gaps")
  ((gaps == MONITORS)) || { why "$gaps of $MONITORS monitors report their restart gap"; return 1; }
}

check_kill() {
  local victim task cid slot owned
  victim=$(sql "SELECT worker_id FROM radar_operational_status GROUP BY worker_id ORDER BY count(*) DESC LIMIT 1")
  owned=$(sql "SELECT count(*) FROM radar_operational_status WHERE worker_id = '$victim'")
  task=${victim#radar-*-}
  slot=${victim#radar-}
  slot=${slot%%-*}
  cid=$("$DOCKER" inspect -f '{{.Status.ContainerStatus.ContainerID}}' "$task")
  log "  docker kill of $victim (slot $slot, $owned monitors)"
  sql "DELETE FROM fleet_generation WHERE name = 'killed'; INSERT INTO fleet_generation VALUES ('killed', '$victim')" >/dev/null
  "$DOCKER" kill "$cid" >/dev/null
  wait_for 240 "Swarm to replace the killed task" replaced "$task" "$slot" || return 1
  check_owned_once 3 || return 1
  # Each monitor of the killed task: its new owner's first commit carries
  # exactly the processed count the killed task last committed (restored,
  # not started fresh).
  local wrong
  wrong=$(sql "WITH killed AS (
                 SELECT DISTINCT ON (service_id) service_id, processed FROM fleet_write_audit
                 WHERE tbl = 'checkpoint' AND writer = '$victim' ORDER BY service_id, seq DESC),
               successor AS (
                 SELECT DISTINCT ON (service_id) service_id, processed, writer FROM fleet_write_audit
                 WHERE tbl = 'checkpoint' AND writer <> '$victim'
                   AND seq > (SELECT max(seq) FROM fleet_write_audit WHERE writer = '$victim')
                 ORDER BY service_id, seq)
               SELECT k.service_id || ': last committed ' || k.processed || ', successor ' || coalesce(s.writer, 'none')
                      || ' first committed ' || coalesce(s.processed::text, 'nothing')
               FROM killed k LEFT JOIN successor s USING (service_id)
               WHERE s.processed IS DISTINCT FROM k.processed OR s.writer NOT LIKE 'radar-$slot-%'")
  local restored
  restored=$(sql "SELECT count(DISTINCT service_id) FROM fleet_write_audit WHERE tbl = 'checkpoint' AND writer = '$victim'")
  ((restored == owned && owned > 0)) || { why "$restored of $owned monitors of the killed task had committed"; return 1; }
  if [[ -n "$wrong" ]]; then
    while read -r line; do why "$line"; done <<<"$wrong"
    return 1
  fi
}

replaced() { # replaced OLD_TASK SLOT: a different task of SLOT is running
  running_tasks | awk -v old="$1" -v slot="$2" '$2 == slot && $1 != old && $3 == "running" { found = 1 } END { exit !found }'
}

check_scale() {
  local n=$1
  log "  WORKERS=$n docker stack deploy (the one documented change)"
  WORKERS=$n IMAGE=radar:fleet-b "$DOCKER" stack deploy --resolve-image never \
    --compose-file deploy/docker-stack.yml "$STACK" >/dev/null
  # A changed shard N replaces every task (a rolling update); a stack
  # whose N did not change only adds tasks, and those must fail the check
  # below rather than leave it waiting for an update that never starts.
  check_owned_once "$n" || return 1
  if [[ -n "$(update_state)" ]]; then wait_update || return 1; fi
}

devkey_failed() {
  [[ "$("$DOCKER" service ps "$DEVKEY_SERVICE" --format '{{.CurrentState}}' | head -n 1)" == Failed* ]]
}

check_devkey() {
  log "  a task of the image whose checkpoint secret holds the public development key"
  "$DOCKER" service create --detach --no-resolve-image --name "$DEVKEY_SERVICE" --restart-condition none --network host \
    --secret source=radar_fleet_devkey,target=radar_checkpoint_secret,uid=10001,gid=10001,mode=0400 \
    --env "DATABASE_URL=$DATABASE_URL" --env RADAR_METRICS_ADDR=127.0.0.1:9399 radar:fleet-b >/dev/null
  wait_for 120 "the development-key task to fail" devkey_failed || { "$DOCKER" service ps "$DEVKEY_SERVICE"; return 1; }
  # The log driver may deliver the lines a moment after the task ended.
  if ! wait_for 30 "the refusal in docker service logs" devkey_logged; then
    "$DOCKER" service logs --raw "$DEVKEY_SERVICE" 2>&1 | tail -n 5 | while read -r line; do why "$line"; done
    return 1
  fi
  why "docker service logs: $("$DOCKER" service logs --raw "$DEVKEY_SERVICE" 2>&1 | grep -m1 -i 'public development key')"
  why "task: $("$DOCKER" service ps "$DEVKEY_SERVICE" --no-trunc --format '{{.CurrentState}}: {{.Error}}' | head -n 1)"
}

devkey_logged() { "$DOCKER" service logs --raw "$DEVKEY_SERVICE" 2>&1 | grep -qi 'public development key'; }

all_died() { # every container in FILE has a die event in FILE2
  local c
  while read -r c; do grep -q "^$c " "$2" || return 1; done <"$1"
}

check_stack_rm() {
  worker_containers >"$WORK/containers"
  : >"$WORK/died"
  "$DOCKER" events --filter type=container --filter event=die \
    --filter "label=com.docker.swarm.service.name=$WORKER_SERVICE" \
    --format '{{.Actor.ID}} {{index .Actor.Attributes "exitCode"}}' >"$WORK/died" &
  EVENTS_PID=$!
  local since
  since=$(sql "SELECT clock_timestamp()")
  sql "DELETE FROM fleet_generation WHERE name = 'final'; INSERT INTO fleet_generation
       SELECT 'final', worker_id FROM radar_operational_status" >/dev/null
  log "  docker stack rm $STACK"
  "$DOCKER" stack rm "$STACK" >/dev/null
  wait_for 120 "every worker container to stop" all_died "$WORK/containers" "$WORK/died" || return 1
  kill "$EVENTS_PID" 2>/dev/null
  EVENTS_PID=
  local codes finals
  codes=$(awk '{ print $2 }' "$WORK/died" | sort | uniq -c | tr -s ' ')
  why "worker exit codes (count code):$codes"
  [[ "$(awk '$2 != 0' "$WORK/died")" == "" ]] || return 1
  # Each monitor's last owner committed a snapshot after the stop began.
  finals=$(sql "SELECT count(DISTINCT a.service_id) FROM fleet_write_audit a
                JOIN radar_operational_status o ON o.service_id = a.service_id AND o.worker_id = a.writer
                WHERE a.tbl = 'checkpoint' AND a.at > '$since'")
  why "$finals of $MONITORS monitors committed a final snapshot"
  ((finals == MONITORS))
}

# Every radar_* metric named by the alerting rules and the dashboard's
# queries is one that the running workers expose (the last /metrics
# scrape of each task). A per-monitor count that is still 0 everywhere
# (no alarm yet) has no sample, but its family is declared (# TYPE).
check_kit_metrics() {
  local name missing=0 names
  names=$({
    awk '/^ *expr:/ { on = 1 } /^ *(for|labels|annotations):/ { on = 0 } on' deploy/prometheus/radar-alerts.yml
    grep '"expr"' deploy/grafana/radar-fleet.json
  } | grep -o 'radar_[a-z_]*' | sort -u)
  [[ -n "$names" ]] || { why "no metric names found"; return 1; }
  for name in $names; do
    if ! grep -qE "^(# TYPE )?${name}(\{| )" "$WORK"/metrics.*; then
      why "$name is queried but no worker exposes it"
      missing=$((missing + 1))
    fi
  done
  why "$(grep -c . <<<"$names") metric names queried, $missing missing"
  ((missing == 0))
}

# The CA certificates that let the builder reach the crate registry stay in
# the builder image: the runtime image's trust store has none of them.
check_no_build_ca() {
  local store cert line leaked=0
  store=$("$DOCKER" run --rm --network none --entrypoint /bin/sh radar:fleet-a -c \
    'cat /etc/ssl/certs/ca-certificates.crt; ls /usr/local/share/ca-certificates')
  [[ -n "$store" ]] || { why "the runtime image has no CA store to compare"; return 1; }
  for cert in /usr/local/share/ca-certificates/*.crt; do
    [[ -f "$cert" ]] || continue
    line=$(sed -n '2p' "$cert")
    if grep -qF -- "$line" <<<"$store" || grep -qF "$(basename "$cert")" <<<"$store"; then
      why "the runtime image trusts $cert"
      leaked=$((leaked + 1))
    fi
  done
  ((leaked == 0))
}
