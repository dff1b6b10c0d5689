//! OpenTelemetry traces and metrics of a run, exported over OTLP/HTTP
//! (protobuf or JSON) when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces
//! endpoint, or `[telemetry] endpoint` in `dsh.toml`) says where, and
//! `OTEL_SDK_DISABLED` does not say no.
//!
//! The trace of a run is built from its events, the same ones the terminal
//! shows ([`mod@follow`]): the run is an `invoke_workflow` span, each phase a
//! span under it, each agent call an `invoke_agent` span under its phase
//! (or its nested workflow's span), its model turns `chat` spans and its
//! tool calls `execute_tool` spans, with the GenAI semantic conventions'
//! attributes. A call's span id is chosen before the call starts, so the
//! program it starts gets its `TRACEPARENT`.
//!
//! What the events do not say of a call (its provider, model and agent
//! type; its prompt and answer) a layer in front of the run's provider
//! notes down ([`mod@layer`]); prompts and answers are exported only
//! when the user opts in (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
//!
//! What it is not: in the run's way. Spans are made on a task of their
//! own from the run's event stream, handed to the SDK's batch processor
//! (a bounded queue on its own thread: a full queue drops, and the SDK
//! counts it), and the export at the end is bounded in time
//! ([`SHUTDOWN_BOUND`]): a collector that is down or slow costs the run
//! nothing, and the CLI at most that bound at exit.

mod client;
mod count;
mod follow;
mod layer;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

pub(crate) use follow::follow;
pub(crate) use layer::{Calls, TelemetryLayer};

/// How long the CLI waits at exit for the last spans to be exported.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(3);

/// How long one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// A run's telemetry: the SDK's providers, and what the layer notes down.
pub(crate) struct Telemetry {
    traces: SdkTracerProvider,
    metrics: SdkMeterProvider,
    pub(crate) calls: Calls,
    pub(crate) capture: bool,
    /// The run's trace: chosen up front, so that a call's `traceparent`
    /// can name it before the run's span is made from its first event.
    pub(crate) trace_id: opentelemetry::trace::TraceId,
    /// The ids the SDK gives spans: the run's trace, and a call's chosen
    /// span id when its span is made.
    pub(crate) ids: Arc<Ids>,
    /// Spans made and delivered, for what is said at the end.
    counts: Arc<count::Counts>,
}

/// The ids this process's spans get: one trace (the run's), chosen up
/// front; a span's id is the one set for it with [`Ids::next_span`], or a
/// random one.
#[derive(Debug)]
pub(crate) struct Ids {
    trace: opentelemetry::trace::TraceId,
    next: std::sync::Mutex<Option<opentelemetry::trace::SpanId>>,
    random: opentelemetry_sdk::trace::RandomIdGenerator,
}

impl Ids {
    fn new() -> Ids {
        use opentelemetry_sdk::trace::IdGenerator as _;
        let random = opentelemetry_sdk::trace::RandomIdGenerator::default();
        Ids {
            trace: random.new_trace_id(),
            next: std::sync::Mutex::new(None),
            random,
        }
    }

    /// The id the next span made gets (spans are made on one task).
    pub(crate) fn next_span(&self, id: opentelemetry::trace::SpanId) {
        if let Ok(mut n) = self.next.lock() {
            *n = Some(id);
        }
    }
}

/// [`Ids`] as the SDK's id generator.
#[derive(Debug)]
struct ChosenIds(Arc<Ids>);

impl opentelemetry_sdk::trace::IdGenerator for ChosenIds {
    fn new_trace_id(&self) -> opentelemetry::trace::TraceId {
        self.0.trace
    }

    fn new_span_id(&self) -> opentelemetry::trace::SpanId {
        self.0
            .next
            .lock()
            .ok()
            .and_then(|mut n| n.take())
            .unwrap_or_else(|| self.0.random.new_span_id())
    }
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TelemetryError {
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0:?}: dsh exports http/protobuf or http/json")]
    Protocol(String),
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Telemetry {
    /// Telemetry as the environment configures it, with `dsh.toml`'s
    /// `[telemetry]` where a variable is not set; `None` when it is not
    /// configured (no OTLP endpoint) or disabled (`OTEL_SDK_DISABLED=true`).
    pub(crate) fn configured(
        file: &dsh_orchestrator::config::Telemetry,
    ) -> Result<Option<Telemetry>, TelemetryError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let from_env = env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
        // The file's endpoint, when no variable names one: the SDK
        // appends the signal's path only to the variable's.
        let file_endpoint = match (&file.endpoint, from_env) {
            (_, true) => None,
            (Some(e), false) => Some(e.trim_end_matches('/').to_string()),
            (None, false) => return Ok(None),
        };
        let protocol = match env("OTEL_EXPORTER_OTLP_PROTOCOL")
            .or_else(|| file.protocol.clone())
            .as_deref()
        {
            None | Some("http/protobuf") => Protocol::HttpBinary,
            Some("http/json") => Protocol::HttpJson,
            Some(other) => return Err(TelemetryError::Protocol(other.to_string())),
        };
        let headers: std::collections::HashMap<String, String> = file
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        use opentelemetry_otlp::WithHttpConfig as _;
        let client =
            Arc::new(client::Blocking::new(EXPORT_TIMEOUT).map_err(TelemetryError::Exporter)?);
        let mut spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_shared_http_client(client.clone())
            .with_protocol(protocol)
            .with_timeout(EXPORT_TIMEOUT);
        let mut metric_exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_shared_http_client(client)
            .with_protocol(protocol)
            .with_timeout(EXPORT_TIMEOUT);
        if !headers.is_empty() {
            spans = spans.with_headers(headers.clone());
            metric_exporter = metric_exporter.with_headers(headers);
        }
        if let Some(e) = &file_endpoint {
            spans = spans.with_endpoint(format!("{e}/v1/traces"));
            metric_exporter = metric_exporter.with_endpoint(format!("{e}/v1/metrics"));
        }
        let spans = spans
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let metric_exporter = metric_exporter
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        // The resource: the standard variables (read by the SDK), else the
        // file's service name, else `dsh`.
        let named = env("OTEL_SERVICE_NAME").is_some()
            || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
        let mut resource = Resource::builder();
        if !named {
            resource = resource
                .with_service_name(file.service_name.clone().unwrap_or_else(|| "dsh".into()));
        }
        let resource = resource
            .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
            .build();
        let ids = Arc::new(Ids::new());
        let counts = Arc::new(count::Counts::default());
        let batch = opentelemetry_sdk::trace::BatchSpanProcessor::builder(count::Delivered {
            inner: spans,
            counts: counts.clone(),
        })
        .build();
        let traces = SdkTracerProvider::builder()
            .with_id_generator(ChosenIds(ids.clone()))
            .with_span_processor(count::Counting {
                inner: batch,
                counts: counts.clone(),
            })
            .with_resource(resource.clone())
            .build();
        // `OTEL_METRICS_EXPORTER=none`: traces only (a backend that takes
        // no metrics, Jaeger or Phoenix, need not refuse them every run).
        let metrics = if env("OTEL_METRICS_EXPORTER").is_some_and(|v| v == "none") {
            SdkMeterProvider::builder().with_resource(resource).build()
        } else {
            SdkMeterProvider::builder()
                .with_periodic_exporter(metric_exporter)
                .with_resource(resource)
                .build()
        };
        let capture = match env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => file.capture_content.unwrap_or(false),
        };
        Ok(Some(Telemetry {
            traces,
            metrics,
            calls: Calls::default(),
            capture,
            trace_id: ids.trace,
            ids,
            counts,
        }))
    }

    /// The layer that notes down what the events do not say of a call.
    pub(crate) fn layer(&self) -> TelemetryLayer {
        TelemetryLayer::new(self.calls.clone(), self.capture, self.trace_id)
    }

    /// Exports what is left, within [`SHUTDOWN_BOUND`], and says how many
    /// spans the collector did not take (and why), if any.
    pub(crate) fn shutdown(self) {
        let Telemetry {
            traces,
            metrics,
            counts,
            ..
        } = self;
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("dsh-otel-shutdown".into())
            .spawn(move || {
                let _ = traces.shutdown();
                let m = metrics.shutdown();
                let _ = tx.send(m);
            });
        if spawned.is_err() {
            return;
        }
        let ended = rx.recv_timeout(SHUTDOWN_BOUND);
        if let Some((lost, made, why)) = counts.lost() {
            let within = if ended.is_err() {
                format!(" within {}s", SHUTDOWN_BOUND.as_secs())
            } else {
                String::new()
            };
            crate::error::warn(&format!(
                "telemetry: {lost} of the run's {made} spans were not delivered to the \
                 collector{within}: {why}"
            ));
        }
        if let Ok(Err(e)) = ended {
            crate::error::warn(&format!(
                "telemetry: the run's metrics were not exported ({e}); a backend that takes no \
                 metrics needs OTEL_METRICS_EXPORTER=none"
            ));
        }
    }

    pub(crate) fn tracer(&self) -> opentelemetry_sdk::trace::Tracer {
        use opentelemetry::trace::TracerProvider as _;
        self.traces.tracer("dsh")
    }

    pub(crate) fn meter(&self) -> opentelemetry::metrics::Meter {
        use opentelemetry::metrics::MeterProvider as _;
        self.metrics.meter("dsh")
    }
}

/// A run's telemetry and the name of its default provider.
pub(crate) struct ForRun {
    telemetry: Telemetry,
    provider: String,
}

impl ForRun {
    /// Follows the run's events on a task of its own.
    pub(crate) fn follow(
        self,
        events: dsh_orchestrator::events::EventStream,
    ) -> tokio::task::JoinHandle<Telemetry> {
        tokio::spawn(async move {
            follow(&self.telemetry, events, self.provider).await;
            self.telemetry
        })
    }
}

/// Telemetry for a run about to start, when the environment configures
/// it: the noting layer put in front of the run's provider. A
/// configuration that cannot be used is said once, and the run goes on
/// without.
pub(crate) fn for_run(
    req: &mut dsh_orchestrator::StartRequest,
    provider: String,
    file: &dsh_orchestrator::config::Telemetry,
) -> Option<ForRun> {
    let telemetry = match Telemetry::configured(file) {
        Ok(t) => t?,
        Err(e) => {
            crate::error::warn(&format!("telemetry is off: {e}"));
            return None;
        }
    };
    req.provider = req
        .provider
        .take()
        .map(|p| dsh_seam::Stack::new().layer(telemetry.layer()).provider(p));
    Some(ForRun {
        telemetry,
        provider,
    })
}

/// Waits for the run's trace to be made, then exports what is left
/// (bounded).
pub(crate) async fn finish(task: tokio::task::JoinHandle<Telemetry>) {
    if let Ok(t) = task.await {
        let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
    }
}

/// The name `gen_ai.provider.name` gives a run's default provider.
pub(crate) fn provider_name(spec: &dsh_orchestrator::journal::rundir::ProviderSpec) -> String {
    use dsh_orchestrator::journal::rundir::ProviderSpec;
    match spec {
        ProviderSpec::None => "none".into(),
        ProviderSpec::Fixture(_) => "fixture".into(),
        ProviderSpec::DryRun => "dry-run".into(),
        ProviderSpec::Configured { provider, .. } => {
            provider.clone().unwrap_or_else(|| "configured".into())
        }
        _ => "unknown".into(),
    }
}

/// Shared by the layer and the follower.
pub(crate) type Shared<T> = Arc<std::sync::Mutex<T>>;
