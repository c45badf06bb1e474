//! The OpenTelemetry SDK side: the meter provider whose Prometheus reader
//! fills the registry that `/metrics` renders, plus an optional OTLP push.

use anyhow::Context;
use opentelemetry::global;
use opentelemetry_sdk::{Resource, metrics::SdkMeterProvider};
use prometheus::{Encoder, Registry, TextEncoder};

/// The Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Builds the meter provider and installs it globally, so that
/// `radar::telemetry::Telemetry::global()` records into it. Call once, before
/// building `Telemetry`. Keep the provider and call `shutdown()` on it at exit.
///
/// `worker_id` becomes the `service.instance.id` resource attribute (a
/// `target_info` label in the exposition). `service.name` is `radar` unless
/// `OTEL_SERVICE_NAME` says otherwise.
pub fn init_meter_provider(worker_id: &str) -> anyhow::Result<(SdkMeterProvider, Registry)> {
    let (provider, registry) = build_meter_provider(worker_id)?;
    global::set_meter_provider(provider.clone());
    Ok((provider, registry))
}

/// The provider and its registry without touching the global provider.
pub fn build_meter_provider(worker_id: &str) -> anyhow::Result<(SdkMeterProvider, Registry)> {
    let registry = Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()
        .context("could not register the Prometheus exporter")?;
    let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.instance.id",
        worker_id.to_owned(),
    ));
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("radar");
    }
    let provider = SdkMeterProvider::builder()
        .with_resource(resource.build())
        .with_reader(exporter)
        .build();
    Ok((provider, registry))
}

/// Collects every metric (running the gauge callbacks) and renders the text.
pub fn render(registry: &Registry) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .context("could not encode the metric families")?;
    String::from_utf8(buf).context("the exposition is not UTF-8")
}
