//! Counting what becomes of a run's spans, so that what a collector did
//! not take is said with its number: spans made (ended, handed to the
//! batch processor) and spans the exporter delivered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// The two counts, and the last reason an export failed.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    made: AtomicU64,
    delivered: AtomicU64,
    why: std::sync::Mutex<Option<String>>,
}

impl Counts {
    /// Spans made and not delivered, of those made, and why, when any.
    pub(crate) fn lost(&self) -> Option<(u64, u64, String)> {
        let made = self.made.load(Ordering::SeqCst);
        let lost = made.saturating_sub(self.delivered.load(Ordering::SeqCst));
        (lost > 0).then(|| {
            let why = self
                .why
                .lock()
                .ok()
                .and_then(|w| w.clone())
                .unwrap_or_else(|| "not sent before the end".into());
            (lost, made, why)
        })
    }
}

/// A span processor that counts the spans it passes on.
#[derive(Debug)]
pub(crate) struct Counting<P> {
    pub(crate) inner: P,
    pub(crate) counts: Arc<Counts>,
}

impl<P: SpanProcessor> SpanProcessor for Counting<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.counts.made.fetch_add(1, Ordering::SeqCst);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// A span exporter that counts the spans it delivered.
#[derive(Debug)]
pub(crate) struct Delivered<E> {
    pub(crate) inner: E,
    pub(crate) counts: Arc<Counts>,
}

impl<E: SpanExporter> SpanExporter for Delivered<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let n = batch.len() as u64;
        let counts = self.counts.clone();
        let sent = self.inner.export(batch);
        async move {
            let result = sent.await;
            match &result {
                Ok(()) => {
                    counts.delivered.fetch_add(n, Ordering::SeqCst);
                }
                Err(e) => {
                    if let Ok(mut why) = counts.why.lock() {
                        *why = Some(e.to_string());
                    }
                }
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
