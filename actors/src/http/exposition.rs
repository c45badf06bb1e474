//! `/metrics`: the per-monitor series written as text from the monitor board
//! (`radar::telemetry::text`), then the per-worker breakdowns and
//! distributions of the OpenTelemetry SDK, whose Prometheus reader fills the
//! registry; plus an optional OTLP push of the SDK's (per-worker) metrics.

use anyhow::Context;
use opentelemetry::{KeyValue, global};
use opentelemetry_sdk::{Resource, metrics::SdkMeterProvider};
use prometheus::{Encoder, Registry, TextEncoder};
use radar::telemetry::{Board, text};

/// The Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The standard OpenTelemetry variables that name an OTLP endpoint.
const OTLP_ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Whether metrics are also pushed over OTLP/HTTP (protobuf), besides being
/// served on `/metrics`. Pushing needs a binary built with `--features otlp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtlpPush {
    Off,
    /// Configured by the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (`/v1/metrics` is appended) or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
    /// (used as is), plus `OTEL_EXPORTER_OTLP_HEADERS`/`_TIMEOUT` and
    /// `OTEL_METRIC_EXPORT_INTERVAL` (default 60 s).
    FromEnvironment,
    /// To this full URL (only the tests push to a URL of their own).
    #[cfg_attr(not(all(test, feature = "otlp")), allow(dead_code))]
    To(String),
}

impl OtlpPush {
    /// `FromEnvironment` when one of the endpoint variables is set.
    pub fn from_env() -> Self {
        let set = OTLP_ENDPOINT_VARIABLES
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|value| !value.is_empty()));
        if set {
            Self::FromEnvironment
        } else {
            Self::Off
        }
    }
}

/// Builds the meter provider and installs it globally, so that
/// `radar::telemetry::Telemetry::global()` records into it. Call once, before
/// building `Telemetry`. Keep the provider and call `shutdown()` on it at exit
/// (that also pushes the last OTLP batch).
///
/// `worker_id` becomes the `service.instance.id` resource attribute (a
/// `target_info` label in the exposition). `service.name` is `radar` unless
/// `OTEL_SERVICE_NAME` says otherwise.
pub fn init_meter_provider(worker_id: &str) -> anyhow::Result<(SdkMeterProvider, Registry)> {
    let (provider, registry) = build_meter_provider(worker_id, OtlpPush::from_env())?;
    global::set_meter_provider(provider.clone());
    Ok((provider, registry))
}

/// The provider and its registry, without touching the global provider.
pub fn build_meter_provider(
    worker_id: &str,
    otlp: OtlpPush,
) -> anyhow::Result<(SdkMeterProvider, Registry)> {
    let registry = Registry::new();
    // No `otel_scope_*` labels: radar has one scope, and on every line of
    // thousands of monitors' series they would be most of the exposition.
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .scope_info_enabled(false)
        .build()
        .context("could not register the Prometheus exporter")?;
    let mut resource = Resource::builder()
        .with_attribute(KeyValue::new("service.instance.id", worker_id.to_owned()));
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("radar");
    }
    let builder = SdkMeterProvider::builder()
        .with_resource(resource.build())
        .with_reader(exporter);
    let builder = with_otlp(builder, otlp)?;
    Ok((builder.build(), registry))
}

#[cfg(feature = "otlp")]
fn with_otlp(
    builder: opentelemetry_sdk::metrics::MeterProviderBuilder,
    otlp: OtlpPush,
) -> anyhow::Result<opentelemetry_sdk::metrics::MeterProviderBuilder> {
    use opentelemetry_otlp::{MetricExporter, WithExportConfig};
    use opentelemetry_sdk::metrics::PeriodicReader;

    let exporter = match otlp {
        OtlpPush::Off => return Ok(builder),
        OtlpPush::FromEnvironment => MetricExporter::builder().with_http().build(),
        OtlpPush::To(url) => MetricExporter::builder()
            .with_http()
            .with_endpoint(url)
            .build(),
    }
    .context("could not set up the OTLP metric exporter; check OTEL_EXPORTER_OTLP_ENDPOINT")?;
    tracing::info!("Pushing metrics over OTLP/HTTP as well as serving /metrics.");
    Ok(builder.with_reader(PeriodicReader::builder(exporter).build()))
}

#[cfg(not(feature = "otlp"))]
fn with_otlp(
    builder: opentelemetry_sdk::metrics::MeterProviderBuilder,
    otlp: OtlpPush,
) -> anyhow::Result<opentelemetry_sdk::metrics::MeterProviderBuilder> {
    if otlp != OtlpPush::Off {
        tracing::warn!(
            "An OTLP endpoint is configured but this binary was built without the `otlp` feature; metrics are only served on /metrics."
        );
    }
    Ok(builder)
}

/// The whole exposition: every monitor's series from `board`, then the
/// SDK's per-worker metrics. The SDK holds a few dozen series whatever the
/// number of monitors (its default limit of 2,000 series per metric is never
/// near), so its collection and the `prometheus` encoding stay cheap.
pub fn render(registry: &Registry, board: &Board) -> anyhow::Result<String> {
    // About 1 KB per idle monitor; growing a 1 MB string by doubling costs copies.
    let mut out = String::with_capacity(board.len() * 1200 + 16 * 1024);
    text::write_board(board, &mut out);
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .context("could not encode the metric families")?;
    out.push_str(std::str::from_utf8(&buf).context("the exposition is not UTF-8")?);
    Ok(out)
}
