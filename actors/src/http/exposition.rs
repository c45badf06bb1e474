//! The OpenTelemetry SDK side: the meter provider whose Prometheus reader
//! fills the registry that `/metrics` renders, plus an optional OTLP push.

use anyhow::Context;
use opentelemetry::{KeyValue, global};
use opentelemetry_sdk::{
    Resource,
    metrics::{Instrument, SdkMeterProvider, Stream},
};
use prometheus::{Encoder, Registry, TextEncoder};

/// The Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How many series one per-monitor metric may hold before the SDK folds the
/// rest into one `otel_metric_overflow="true"` series. The SDK's default is
/// 2,000 per metric, which a worker passes at 2,000 monitors (and at 400
/// monitors of five readings for `radar_reading_age_seconds`, or of five gap
/// causes); this covers 16,384 monitors for single-series metrics and 3,276
/// for those with five series per monitor. The SDK reserves room for this
/// many series per per-monitor metric up front (about 1 MiB each).
pub const MAX_SERIES_PER_METRIC: usize = 16_384;

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
    /// To this full URL (tests).
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
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
        .with_view(per_monitor_series_limit)
        .with_reader(exporter);
    let builder = with_otlp(builder, otlp)?;
    Ok((builder.build(), registry))
}

/// Raises the series limit of every per-monitor metric (see
/// [`MAX_SERIES_PER_METRIC`]); per-worker metrics keep the SDK's default.
fn per_monitor_series_limit(instrument: &Instrument) -> Option<Stream> {
    let per_monitor = radar::telemetry::Metric::ALL
        .iter()
        .any(|m| m.name() == instrument.name() && m.per_monitor());
    if !per_monitor {
        return None;
    }
    Stream::builder()
        .with_cardinality_limit(MAX_SERIES_PER_METRIC)
        .build()
        .ok()
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

/// Collects every metric (running the gauge callbacks) and renders the text.
pub fn render(registry: &Registry) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .context("could not encode the metric families")?;
    String::from_utf8(buf).context("the exposition is not UTF-8")
}
