//! The deployment files say what the operator docs promise: the Swarm
//! stack (parsed as YAML) and the Dockerfile (checked rule by rule; CI
//! needs no Docker engine and no linter for this).

use radar_testkit::workspace;
use serde_norway::Value;

const STACK: &str = include_str!("../deploy/docker-stack.yml");
const DOCKERFILE: &str = include_str!("../Dockerfile");
const DOCKERIGNORE: &str = include_str!("../.dockerignore");
const COLLECTOR: &str = include_str!("../config/otel-collector.yaml");

fn stack() -> Value {
    let mut value: Value = serde_norway::from_str(STACK).expect("docker-stack.yml is YAML");
    // Compose merge keys (`<<: *anchor`) are resolved by Docker; do the same.
    value.apply_merge().expect("merge keys resolve");
    value
}

fn service<'a>(stack: &'a Value, name: &str) -> &'a Value {
    let service = &stack["services"][name];
    assert!(!service.is_null(), "the stack has no service {name}");
    service
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{value:?} is not a string"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_sequence()
        .unwrap_or_else(|| panic!("{value:?} is not a list"))
        .iter()
        .map(text)
        .collect()
}

/// The value of a `${NAME:-default}` or `${NAME:?message}` reference as
/// `docker stack deploy` resolves it when NAME is unset (None for `:?`).
fn unset_default(value: &str) -> Option<&str> {
    let inner = value.strip_prefix("${")?.strip_suffix('}')?;
    inner.split_once(":-").map(|(_, default)| default)
}

#[test]
fn workers_derive_their_shard_from_the_task_slot_over_the_one_worker_count() {
    let stack = stack();
    let worker = service(&stack, "radar-worker");
    // One variable sets both the replica count and every shard's N, and it
    // has no default that a forgotten export could silently fall back to.
    let workers = "${WORKERS:?set WORKERS to the number of worker tasks}";
    assert_eq!(text(&worker["deploy"]["replicas"]), workers);
    let shard = text(&worker["environment"]["RADAR_SHARD"]);
    assert_eq!(shard, format!("{{{{.Task.Slot}}}}/{workers}"));
    assert_eq!(
        STACK.matches("WORKERS:").count(),
        2,
        "WORKERS is read exactly twice"
    );
    assert_eq!(strings(&worker["command"]), ["radar", "worker"]);
}

#[test]
fn workers_run_in_production_with_the_checkpoint_key_as_a_swarm_secret() {
    let stack = stack();
    let worker = service(&stack, "radar-worker");
    assert_eq!(text(&worker["environment"]["RADAR_ENV"]), "production");
    assert_eq!(
        text(&worker["environment"]["RADAR_CHECKPOINT_SECRET_FILE"]),
        "/run/secrets/radar_checkpoint_secret"
    );
    assert!(
        worker["environment"]["RADAR_CHECKPOINT_SECRET"].is_null(),
        "the key must never be inline"
    );
    let secrets: Vec<&str> = worker["secrets"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|s| text(&s["source"]))
        .collect();
    assert!(secrets.contains(&"radar_checkpoint_secret"));
    assert_eq!(
        stack["secrets"]["radar_checkpoint_secret"]["external"].as_bool(),
        Some(true),
        "the secret is created outside the stack file"
    );
    // The database URL and the broker password are secrets too, read by
    // radar from their files: no wrapper, no value in the service definition.
    assert!(secrets.contains(&"radar_database_url"));
    assert!(secrets.contains(&"radar_mqtt_password"));
    assert_eq!(
        text(&worker["environment"]["RADAR_DATABASE_URL_FILE"]),
        "/run/secrets/radar_database_url"
    );
    assert_eq!(
        text(&worker["environment"]["RADAR_MQTT_PASSWORD_FILE"]),
        "/run/secrets/radar_mqtt_password"
    );
    assert!(
        worker["entrypoint"].is_null(),
        "the image's entrypoint runs radar itself"
    );
    assert!(worker["environment"]["DATABASE_URL"].is_null());
}

#[test]
fn workers_inherit_the_daemons_open_file_limit() {
    let stack = stack();
    // A task's hard nofile limit above the Docker daemon's own fails every
    // task at start ("starting container failed"): with `ulimits: nofile:
    // 65536` no worker of the fleet test started under a daemon whose hard
    // limit was 20,000. The worker raises its soft limit to the hard one
    // it inherits instead (actors/src/worker/limits.rs).
    let worker = service(&stack, "radar-worker");
    assert!(
        worker["ulimits"].is_null(),
        "the worker service sets ulimits: {:?}",
        worker["ulimits"]
    );
}

#[test]
fn updates_start_the_new_task_first_and_roll_back_on_failure() {
    let stack = stack();
    let deploy = &service(&stack, "radar-worker")["deploy"];
    assert_eq!(text(&deploy["update_config"]["order"]), "start-first");
    assert_eq!(text(&deploy["update_config"]["failure_action"]), "rollback");
    assert!(deploy["rollback_config"].is_mapping());
    for kind in ["limits", "reservations"] {
        let resources = &deploy["resources"][kind];
        assert!(
            resources["cpus"].is_string() && resources["memory"].is_string(),
            "worker {kind} need cpus and memory"
        );
    }
}

#[test]
fn the_metrics_port_is_open_to_the_collector_which_scrapes_it() {
    let stack = stack();
    let worker = service(&stack, "radar-worker");
    let addr = text(&worker["environment"]["RADAR_METRICS_ADDR"]);
    assert_eq!(unset_default(addr), Some("0.0.0.0:9464"));
    let health = strings(&worker["healthcheck"]["test"]).join(" ");
    assert!(
        health.contains("$${RADAR_METRICS_ADDR##*:}/healthz"),
        "{health}"
    );
    assert_eq!(text(&worker["deploy"]["endpoint_mode"]), "dnsrr");
    let collector = service(&stack, "otel-collector");
    assert!(!text(&collector["image"]).ends_with(":latest"));
    let config = &collector["configs"][0];
    let source = text(&config["source"]);
    assert_eq!(
        text(&stack["configs"][source]["file"]),
        "../config/otel-collector.yaml"
    );
    // Every task by its own address (DNS round robin): no virtual IP.
    assert!(COLLECTOR.contains("names: [tasks.radar-worker]"));
    let networks = |s: &Value| {
        strings(&s["networks"])
            .into_iter()
            .map(|n| unset_default(n).unwrap_or(n).to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(networks(worker), networks(collector));
}

#[test]
fn migrations_run_once_as_a_one_off_task() {
    let stack = stack();
    let migrate = service(&stack, "radar-migrate");
    assert_eq!(strings(&migrate["command"]), ["radar", "migrate"]);
    assert_eq!(
        text(&migrate["deploy"]["restart_policy"]["condition"]),
        "none"
    );
    assert_eq!(text(&migrate["environment"]["RADAR_ENV"]), "production");
}

/// Instructions of the Dockerfile, continuation lines joined.
fn instructions() -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in DOCKERFILE.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else if !line.starts_with('#') {
            current.push_str(line);
            out.push(std::mem::take(&mut current));
        }
    }
    out
}

fn with_keyword<'a>(all: &'a [String], keyword: &str) -> Vec<&'a str> {
    all.iter()
        .filter(|i| i.split_whitespace().next() == Some(keyword))
        .map(String::as_str)
        .collect()
}

#[test]
fn the_dockerfile_pins_its_base_images_and_builds_only_the_locked_binary() {
    let all = instructions();
    let args: Vec<&str> = with_keyword(&all, "ARG");
    let froms = with_keyword(&all, "FROM");
    assert_eq!(froms.len(), 2, "a builder and a runtime stage");
    for from in &froms {
        let image = from.split_whitespace().nth(1).unwrap();
        // `${ARG}`: look the default up.
        let image = match image.strip_prefix("${").and_then(|s| s.strip_suffix('}')) {
            Some(arg) => args
                .iter()
                .find_map(|a| a.strip_prefix(&format!("ARG {arg}=")))
                .unwrap_or_else(|| panic!("no default for {arg}")),
            None => image,
        };
        let (_, tag) = image
            .split_once(':')
            .unwrap_or_else(|| panic!("{image} has no tag"));
        assert_ne!(tag, "latest");
        assert!(
            tag.chars().next().is_some_and(|c| c.is_ascii_digit()),
            "{image}: pin a version, not a moving name"
        );
    }
    let runs = with_keyword(&all, "RUN").join("\n");
    assert!(runs.contains("cargo build --release -p radar-actors --locked"));
    assert!(runs.contains("--no-install-recommends") && runs.contains("rm -rf /var/lib/apt/lists"));
}

#[test]
fn the_runtime_image_runs_the_worker_as_a_non_root_user_with_a_health_check() {
    let all = instructions();
    let runtime_start = all.iter().rposition(|i| i.starts_with("FROM ")).unwrap();
    let runtime = &all[runtime_start..];
    let user = with_keyword(runtime, "USER");
    assert_eq!(user.len(), 1);
    let who = user[0].split_whitespace().nth(1).unwrap();
    assert!(!["root", "0", "0:0"].contains(&who), "runs as {who}");
    let copies = with_keyword(runtime, "COPY");
    assert!(
        copies
            .iter()
            .any(|c| c.contains("--from=builder") && c.ends_with("/usr/local/bin/radar"))
    );
    assert!(
        copies
            .iter()
            .all(|c| c.contains("--from=builder") || c.contains("migrations")),
        "the runtime image holds only the binary and the migrations: {copies:?}"
    );
    let health = with_keyword(runtime, "HEALTHCHECK");
    assert_eq!(health.len(), 1);
    assert!(health[0].contains("/healthz"));
    assert_eq!(with_keyword(runtime, "CMD"), [r#"CMD ["radar", "worker"]"#]);
    let env = with_keyword(runtime, "ENV").join(" ");
    assert!(
        env.contains("RADAR_ENV=production") && env.contains("RADAR_METRICS_ADDR=0.0.0.0:9464")
    );
    assert!(with_keyword(runtime, "EXPOSE").contains(&"EXPOSE 9464"));
}

#[test]
fn the_build_context_leaves_out_build_output_history_and_secrets() {
    let lines: Vec<&str> = DOCKERIGNORE.lines().map(str::trim).collect();
    for excluded in ["**/target", ".git", ".env", "fuzz/artifacts"] {
        assert!(lines.contains(&excluded), ".dockerignore lacks {excluded}");
    }
}

/// The paths the builder stage copies (every source of every COPY).
fn builder_copies() -> Vec<String> {
    let all = instructions();
    let runtime_start = all.iter().rposition(|i| i.starts_with("FROM ")).unwrap();
    let copies = with_keyword(&all[..runtime_start], "COPY");
    copies
        .iter()
        .flat_map(|c| {
            let args: Vec<&str> = c
                .split_whitespace()
                .skip(1)
                .filter(|a| !a.starts_with("--"))
                .collect();
            let sources = &args[..args.len().saturating_sub(1)];
            sources.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_image_build_gets_the_manifest_and_sources_of_every_workspace_member() {
    // Cargo reads every member's manifest to build one package, and the
    // binary compiles the library crates it depends on: a member missing
    // here fails `docker build` only, which CI runs last.
    let copies = builder_copies();
    let ignore: Vec<&str> = DOCKERIGNORE.lines().map(str::trim).collect();
    for member in workspace::members() {
        let (manifest, sources) = match member.folder.as_str() {
            "." => ("Cargo.toml".to_string(), "src".to_string()),
            f => (format!("{f}/Cargo.toml"), format!("{f}/src")),
        };
        let copied = |path: &str| copies.iter().any(|c| c == path || *c == member.folder);
        assert!(copied(&manifest), "the Dockerfile does not copy {manifest}");
        assert!(copied(&sources), "the Dockerfile does not copy {sources}");
        for allowed in [format!("!{manifest}"), format!("!{sources}/**")] {
            assert!(
                ignore.contains(&allowed.as_str()),
                ".dockerignore lacks {allowed} ({} is a workspace member)",
                member.package
            );
        }
    }
}
