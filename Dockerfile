# radar's container image: one static set of files, the `radar` binary.
#
#   docker build -t radar:0.1.0 .
#   docker run --rm radar:0.1.0 radar --help
#
# The database migrations are compiled into the binary (`radar migrate`
# applies them), so the runtime image needs no migrations folder to work; a
# read-only copy sits in /usr/share/radar/migrations for operators who want to
# read what a release will do to their schema before running it.
#
# Base images are pinned to an exact Rust release and an exact Debian point
# release, both Debian 12 (bookworm), so the binary links against the same
# glibc it runs on. For reproducible production builds, pin them further by
# digest in your registry mirror (`debian:12.12-slim@sha256:...`) and bump
# them deliberately.

ARG RUST_IMAGE=rust:1.95.0-slim-bookworm
ARG RUNTIME_IMAGE=debian:12.12-slim

FROM ${RUST_IMAGE} AS builder
WORKDIR /src
# Only what the build reads: manifests, build script, sources, migrations
# (embedded by the migration macro at compile time). See .dockerignore.
# Cargo loads every workspace member's manifest and targets even to build
# one package, so the test tools (chaos, bench, testkit) come along; they
# are not compiled. The binary is built from src, actors and demo.
COPY Cargo.toml Cargo.lock build.rs ./
COPY actors/Cargo.toml actors/Cargo.toml
COPY demo/Cargo.toml demo/Cargo.toml
COPY chaos chaos
COPY bench bench
COPY testkit testkit
COPY src src
COPY actors/src actors/src
COPY demo/src demo/src
COPY migrations migrations
# The registry and target caches survive between builds on one builder; the
# binary is copied out in the same step because the cache mount is not part
# of the image. --locked: the image is built from exactly the reviewed
# Cargo.lock (which also fixes the scientific runtime versions recorded in
# every snapshot).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release -p radar-actors --locked \
    && install -D -m 0755 target/release/radar /out/radar

FROM ${RUNTIME_IMAGE} AS runtime
# curl serves the HEALTHCHECK only (Debian slim ships no HTTP client). It was
# chosen over busybox's wget because `curl -f` turns an HTTP error status into
# a failing exit code and the package is tracked by every image scanner;
# ca-certificates is there for TLS endpoints (collectors, a future TLS
# broker). Versions are not pinned: Debian replaces a package version in the
# archive with each security update, so an exact pin would break rebuilds;
# the pinned point release of the base image is the reproducibility anchor.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 radar \
    && useradd --system --uid 10001 --gid radar --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin radar

COPY --from=builder /out/radar /usr/local/bin/radar
COPY migrations /usr/share/radar/migrations

# Production reads the checkpoint key only from the mounted secret file
# (/run/secrets/radar_checkpoint_secret by default) and refuses the public
# development key. The metrics and health listener must accept connections
# from outside the container for the collector and the health check.
ENV RADAR_ENV=production \
    RADAR_METRICS_ADDR=0.0.0.0:9464 \
    RADAR_LOG_FORMAT=json

USER 10001:10001
EXPOSE 9464

# /healthz answers while the process is alive; readiness (/readyz) is left to
# the orchestrator's traffic decisions, because a worker whose broker is down
# must keep running and reconnecting rather than be restarted. The address is
# taken from RADAR_METRICS_ADDR (a wildcard host becomes 127.0.0.1) so an
# override, e.g. one loopback address per task on a host network, keeps the
# check working.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["/bin/sh", "-c", "h=${RADAR_METRICS_ADDR%:*}; [ \"$h\" = 0.0.0.0 ] && h=127.0.0.1; curl -fsS -o /dev/null \"http://$h:${RADAR_METRICS_ADDR##*:}/healthz\""]

# No ENTRYPOINT and no init: radar runs as PID 1, handles SIGTERM itself
# (final snapshots, then exit 0) and starts no child processes to reap.
CMD ["radar", "worker"]
