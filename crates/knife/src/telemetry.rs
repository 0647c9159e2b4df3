//! knife's logs and traces: the stderr log (`RUST_LOG`), and with `[telemetry]
//! otlp_endpoint` the same spans exported over OTLP/HTTP (docs/2026-12-01-telemetry.md).

use std::sync::OnceLock;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

type OtelSlot = Option<Box<dyn Layer<Registry> + Send + Sync>>;

/// The empty slot `init_tracing` leaves for the OTLP layer, filled by [`export_otlp`]
/// once the config is read (the log starts before it).
static OTEL: OnceLock<reload::Handle<OtelSlot, Registry>> = OnceLock::new();

/// Logs to stderr; `RUST_LOG` overrides the level (servers log at info, other commands
/// at warn). Spans (`run{thread=… run=…}`, `provider_session{…}`, `http{…}`,
/// `model_call{…}`) prefix the lines written inside them.
pub fn init_tracing(server: bool) {
    let default = if server { "info" } else { "warn" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let (otel, handle) = reload::Layer::new(OtelSlot::None);
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if tracing_subscriber::registry()
        .with(otel)
        .with(filter)
        .with(log)
        .try_init()
        .is_ok()
    {
        let _ = OTEL.set(handle);
    }
}

/// Exports the spans to the OTLP/HTTP collector at `endpoint` (JSON encoding, batched
/// on a thread of its own, service name `knife`). Dropping the guard flushes what is
/// left (up to the exporter's 10 s timeout).
///
/// Errors: `endpoint` is not an http(s) URL, the exporter cannot be built, or the log
/// was not set up by [`init_tracing`].
pub async fn export_otlp(endpoint: &str) -> anyhow::Result<OtlpGuard> {
    let url = traces_url(endpoint)?;
    let handle = OTEL
        .get()
        .context("the log was not initialised, so the OTLP exporter has nothing to attach to")?
        .clone();
    // The blocking HTTP client of the exporter must be built (and later dropped) outside
    // the async runtime.
    let provider = tokio::task::spawn_blocking(move || {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(url)
            .build()?;
        anyhow::Ok(
            opentelemetry_sdk::trace::SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(
                    opentelemetry_sdk::Resource::builder()
                        .with_service_name("knife")
                        .build(),
                )
                .build(),
        )
    })
    .await
    .context("building the OTLP exporter panicked")??;
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("knife"));
    handle
        .modify(|slot| *slot = Some(Box::new(layer)))
        .context("cannot attach the OTLP exporter to the log")?;
    Ok(OtlpGuard {
        provider: Some(provider),
    })
}

/// `<endpoint>/v1/traces`, unless `endpoint` already names that path.
fn traces_url(endpoint: &str) -> anyhow::Result<String> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    if !(trimmed.starts_with("http://") || trimmed.starts_with("https://")) {
        anyhow::bail!(
            "[telemetry] otlp_endpoint = {endpoint:?} is not an http(s) URL; use the collector's \
             OTLP/HTTP address, e.g. http://127.0.0.1:4318"
        );
    }
    Ok(if trimmed.ends_with("/v1/traces") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/traces")
    })
}

/// Keeps the OTLP export running; dropping it flushes the spans still queued.
pub struct OtlpGuard {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl OtlpGuard {
    /// Flushes and stops the export (what `Drop` does, awaited off the runtime).
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(e) = provider.shutdown() {
                    tracing::warn!(error = %e, "flushing the OTLP spans failed");
                }
            })
            .await;
        }
    }
}

impl Drop for OtlpGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Off the async runtime's threads: the exporter's client blocks.
            std::thread::spawn(move || {
                let _ = provider.shutdown();
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_added_once_and_other_schemes_are_refused() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").ok().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(
            traces_url("https://otel.example/v1/traces/")
                .ok()
                .as_deref(),
            Some("https://otel.example/v1/traces")
        );
        let err = traces_url("127.0.0.1:4317").err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("not an http(s) URL")));
    }
}
