# Helpers of scripts/fleet-test: the engine, the offline base images, the
# database, the monitors and their publishers. Sourced, not run.

# The engine's own CLI when the docker.io package installed one: a newer
# CLI without the buildx plugin cannot drive BuildKit on a 20.10 engine.
DOCKER=docker
[[ -x /usr/bin/docker ]] && DOCKER=/usr/bin/docker
export LC_ALL=C PGOPTIONS='-c client_min_messages=warning'

log() { printf '[fleet-test %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@"; do
    if ((SECONDS >= deadline)); then log "gave up waiting for $what"; return 1; fi
    sleep 1
  done
}

psql_admin() { psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -v ON_ERROR_STOP=1 -Atq "$@"; }
sql() { psql -h 127.0.0.1 -p 5432 -U postgres -d "$DB" -v ON_ERROR_STOP=1 -Atqc "$1"; }

apt_install() {
  log "installing $* (apt, without recommends)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

engine_up() { "$DOCKER" info >/dev/null 2>&1; }

ensure_engine() {
  engine_up && return
  if ! command -v dockerd >/dev/null; then
    apt_install docker.io
    DOCKER=/usr/bin/docker
  fi
  log "starting the Docker engine (log: /var/log/radar-fleet-dockerd.log)"
  setsid nohup dockerd >/var/log/radar-fleet-dockerd.log 2>&1 </dev/null &
  wait_for 60 "the Docker engine" engine_up
}

task_state_is() { # task_state_is SERVICE STATE: its newest task is in STATE
  [[ "$("$DOCKER" service ps "$1" --format '{{.CurrentState}}' 2>/dev/null | head -n 1)" == "$2"* ]]
}

image_exists() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

# The Dockerfile's default base images when the engine has them or can pull
# them; otherwise images of the same Debian release made offline with
# debootstrap, and a builder image with this machine's Rust toolchain.
# Sets BUILD_ARGS for `docker build`.
ensure_base_images() {
  local cache=$1 rust_image runtime_image version
  rust_image=$(sed -n 's/^ARG RUST_IMAGE=//p' Dockerfile)
  runtime_image=$(sed -n 's/^ARG RUNTIME_IMAGE=//p' Dockerfile)
  BUILD_ARGS=()
  if image_exists "$rust_image" && image_exists "$runtime_image"; then return; fi
  version=${rust_image#rust:}
  version=${version%%-*}
  local offline_runtime=radar-fleet/debian:bookworm offline_rust="radar-fleet/rust:$version"
  BUILD_ARGS=(--build-arg "RUST_IMAGE=$offline_rust" --build-arg "RUNTIME_IMAGE=$offline_runtime")
  if image_exists "$offline_rust" && image_exists "$offline_runtime"; then return; fi
  if timeout 30 "$DOCKER" pull -q "$runtime_image" >/dev/null 2>&1 &&
    timeout 600 "$DOCKER" pull -q "$rust_image" >/dev/null 2>&1; then
    BUILD_ARGS=()
    return
  fi
  log "no registry reachable: making the base images offline"
  if ! image_exists "$offline_runtime"; then
    if [[ ! -x "$cache/rootfs/bin/sh" ]]; then
      command -v debootstrap >/dev/null || apt_install debootstrap
      log "debootstrap --variant=minbase bookworm (about a minute)"
      rm -rf "$cache/rootfs.tmp" && mkdir -p "$cache"
      debootstrap --variant=minbase bookworm "$cache/rootfs.tmp" >"$cache/debootstrap.log" 2>&1
      mv "$cache/rootfs.tmp" "$cache/rootfs"
    fi
    tar -C "$cache/rootfs" -c . | "$DOCKER" import - "$offline_runtime" >/dev/null
  fi
  if ! image_exists "$offline_rust"; then
    make_builder_image "$cache" "$version" "$offline_rust"
  fi
}

# Builder base: the Debian root file system plus gcc, this machine's Rust
# toolchain of the Dockerfile's version, and this machine's CA certificates
# so cargo reaches the crate registry. Only the builder stage starts from
# it: the shipped runtime stage never sees these certificates.
make_builder_image() {
  local cache=$1 version=$2 name=$3 sysroot dir="$1/builder"
  sysroot=$(rustc "+$version" --print sysroot 2>/dev/null || rustc --print sysroot)
  if [[ "$("$sysroot/bin/rustc" --version)" != "rustc $version "* ]]; then
    log "the Dockerfile builds with Rust $version; this machine has $("$sysroot/bin/rustc" --version)"
    return 1
  fi
  log "making $name from the Debian base and $sysroot"
  rm -rf "$dir" && cp -a "$cache/rootfs" "$dir"
  chroot "$dir" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev ca-certificates >/dev/null 2>&1 && rm -rf /var/lib/apt/lists/*'
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
    chroot "$dir" update-ca-certificates >/dev/null 2>&1
  fi
  mkdir -p "$dir/usr/local/rust" "$dir/usr/local/cargo"
  cp -a "$sysroot/bin" "$sysroot/lib" "$dir/usr/local/rust/"
  tar -C "$dir" -c . | "$DOCKER" import \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CARGO_HOME=/usr/local/cargo' - "$name" >/dev/null
  rm -rf "$dir"
}

# The test monitors of testkit/src/monitor.rs (two readings, short training).
monitor_toml() { # monitor_toml NAME TOPIC_PREFIX
  cat <<EOF
name = "$1"

[[readings]]
name = "a"
topic = "$2/a"

[[readings]]
name = "b"
topic = "$2/b"

[alignment]
freshness_ms = 5000
max_age_ms = 30000
future_tolerance_ms = 2000
max_skew_ms = 1000

[detector]
training_frames = 20
calibration_frames = 20
false_alarm_rate = 0.05

[detector.alarm]
open_k = 3
open_n = 5
close_m = 10
EOF
}

# Five frames a second to one monitor's two topics, one mosquitto_pub per
# topic; runs in its own session so cleanup ends the whole group.
publisher_loop() {
  exec 3> >(exec mosquitto_pub -h 127.0.0.1 -p 1883 -q 1 -l -t "$1/a") \
    4> >(exec mosquitto_pub -h 127.0.0.1 -p 1883 -q 1 -l -t "$1/b")
  local ts
  while :; do
    ts=${EPOCHREALTIME/./}
    ts=${ts:0:13}
    printf '{"ts": %s, "value": 10.%04d}\n' "$ts" $((RANDOM % 10000)) >&3
    printf '{"ts": %s, "value": 20.%04d}\n' "$ts" $((RANDOM % 10000)) >&4
    sleep 0.2
  done
}
export -f publisher_loop

start_publisher() { # start_publisher TOPIC_PREFIX: prints the group id
  setsid bash -c 'publisher_loop "$0"' "$1" >/dev/null 2>&1 </dev/null &
  echo $!
}

# Logs every write to the snapshot, result and status tables with the time
# of its transaction's end (deferred triggers run just before the commit),
# so the writes of overlapping tasks can be ordered after the fact, and the
# time its transaction began (`began`: a status write's token check reads a
# snapshot taken no earlier).
install_write_audit() {
  sql "CREATE TABLE fleet_write_audit (
         seq bigserial PRIMARY KEY, tbl text NOT NULL, service_id uuid NOT NULL,
         writer text, signature bytea, processed bigint,
         at timestamptz NOT NULL DEFAULT clock_timestamp(),
         began timestamptz NOT NULL DEFAULT now());
       CREATE FUNCTION fleet_audit() RETURNS trigger AS \$\$
       BEGIN
         IF TG_TABLE_NAME = 'radar_runtime_checkpoints' THEN
           INSERT INTO fleet_write_audit (tbl, service_id, writer, signature, processed)
           VALUES ('checkpoint', NEW.service_id, NEW.writer_id, NEW.signature, NEW.processed_count);
         ELSIF TG_TABLE_NAME = 'radar_operational_status' THEN
           INSERT INTO fleet_write_audit (tbl, service_id, writer) VALUES ('status', NEW.service_id, NEW.worker_id);
         ELSE
           INSERT INTO fleet_write_audit (tbl, service_id, signature)
           VALUES (TG_TABLE_NAME, NEW.service_id, NEW.writer_signature);
         END IF;
         RETURN NULL;
       END \$\$ LANGUAGE plpgsql;
       CREATE CONSTRAINT TRIGGER fleet_audit AFTER INSERT OR UPDATE ON radar_runtime_checkpoints
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fleet_audit();
       CREATE CONSTRAINT TRIGGER fleet_audit AFTER INSERT OR UPDATE ON radar_operational_status
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fleet_audit();
       CREATE CONSTRAINT TRIGGER fleet_audit AFTER INSERT OR UPDATE ON radar_evidence
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fleet_audit();
       CREATE CONSTRAINT TRIGGER fleet_audit AFTER INSERT OR UPDATE ON radar_alarms
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fleet_audit();
       CREATE TABLE fleet_generation (name text NOT NULL, worker text NOT NULL);"
}
