//! Posting spans to an OTLP/HTTP collector from a thread of its own (no async runtime), with the
//! runner's HTTP agent: the run hands over batches and never waits, except for one bounded flush
//! at its end ([`Exporter::finish`]). A batch the queue cannot take (the collector is slow), a
//! request that fails (down, refusing, answering 4xx/5xx) or spans still unsent when the flush
//! ends are counted as dropped, with the last error, in [`Stats`] — recorded with the run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde::Serialize;

use super::OtelConfig;

/// The OTLP/HTTP encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Protocol {
    /// `http/protobuf`: binary protobuf, `application/x-protobuf`.
    #[serde(rename = "http/protobuf")]
    Protobuf,
    /// `http/json`: the protobuf JSON mapping, `application/json`.
    #[serde(rename = "http/json")]
    Json,
}

/// Batches that may wait for the exporter thread; more are dropped (and counted).
const QUEUE: usize = 16;

/// What a run's export came to, recorded with the run (`runs.telemetry_json`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Stats {
    /// Where spans were sent (no credentials: headers are never recorded).
    pub endpoint: String,
    /// The encoding.
    pub protocol: String,
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans that could not be delivered (queue full, request failed, flush ran out of time).
    pub dropped: u64,
    /// Export requests sent.
    pub requests: u64,
    /// The last failure, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

struct Shared {
    exported: AtomicU64,
    dropped: AtomicU64,
    requests: AtomicU64,
    /// Spans handed over and not yet delivered or dropped.
    pending: AtomicU64,
    error: Mutex<Option<String>>,
}

impl Shared {
    fn fail(&self, spans: u64, why: String) {
        self.dropped.fetch_add(spans, Ordering::SeqCst);
        if let Ok(mut e) = self.error.lock() {
            *e = Some(why);
        }
    }
}

/// The exporter thread and the queue to it (see the module docs).
pub struct Exporter {
    tx: Mutex<Option<SyncSender<Vec<Span>>>>,
    done: Mutex<Option<Receiver<()>>>,
    shared: Arc<Shared>,
    timeout: Duration,
    endpoint: String,
    protocol: Protocol,
}

impl Exporter {
    /// Starts the thread posting to `config`'s endpoint. A certificate file that cannot be read
    /// trusts nothing (every request fails, and says why).
    pub fn start(config: &OtelConfig) -> Exporter {
        let trust = match &config.certificate {
            None => Ok(crate::net::agent::Trust::WebPki),
            Some(path) => crate::net::agent::CaFile::load(path).map(|ca| ca.trust()),
        };
        let shared = Arc::new(Shared {
            exported: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            error: Mutex::new(None),
        });
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Span>>(QUEUE);
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let poster = Poster {
            agent: crate::net::agent::agent(
                config.timeout,
                trust
                    .as_ref()
                    .unwrap_or(&crate::net::agent::Trust::Extra(Vec::new())),
            ),
            endpoint: config.endpoint.clone(),
            protocol: config.protocol,
            headers: config.headers.clone(),
            resource: Resource {
                attributes: config
                    .resource
                    .iter()
                    .map(|(k, v)| KeyValue {
                        key: k.clone(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue(v.clone())),
                        }),
                        ..KeyValue::default()
                    })
                    .collect(),
                ..Resource::default()
            },
            shared: shared.clone(),
            trust_error: trust.err(),
        };
        let spawned = std::thread::Builder::new()
            .name("acode-otlp".into())
            .spawn(move || {
                while let Ok(batch) = rx.recv() {
                    poster.post(batch);
                }
                let _ = done_tx.send(());
            });
        if let Err(e) = spawned {
            shared.fail(0, format!("cannot start the exporter thread: {e}"));
        }
        Exporter {
            tx: Mutex::new(Some(tx)),
            done: Mutex::new(Some(done_rx)),
            shared,
            timeout: config.timeout,
            endpoint: config.endpoint.clone(),
            protocol: config.protocol,
        }
    }

    /// Queues `batch` without waiting: when the queue is full (the collector is slower than the
    /// run) the batch is dropped and counted.
    pub fn send(&self, batch: Vec<Span>) {
        let n = batch.len() as u64;
        let guard = match self.tx.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let Some(tx) = guard.as_ref() else {
            self.shared.fail(n, "spans after the export ended".into());
            return;
        };
        self.shared.pending.fetch_add(n, Ordering::SeqCst);
        match tx.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.shared.pending.fetch_sub(n, Ordering::SeqCst);
                self.shared.fail(
                    n,
                    "the collector is slower than the run: a batch of spans was dropped".into(),
                );
            }
            Err(TrySendError::Disconnected(_)) => {
                self.shared.pending.fetch_sub(n, Ordering::SeqCst);
                self.shared.fail(n, "the exporter thread is gone".into());
            }
        }
    }

    /// Closes the queue and waits for the thread to post what is queued, at most the export
    /// timeout; what is still unsent then is dropped (the thread is left to end on its own) and
    /// counted. Returns the totals.
    pub fn finish(&self) -> Stats {
        let started = Instant::now();
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        let done = self.done.lock().ok().and_then(|mut d| d.take());
        if let Some(done) = done {
            match done.recv_timeout(self.timeout) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => {}
                Err(RecvTimeoutError::Timeout) => {
                    let left = self.shared.pending.swap(0, Ordering::SeqCst);
                    self.shared.fail(
                        left,
                        format!(
                            "the collector did not take the last spans within {} ms \
                             (OTEL_EXPORTER_OTLP_TIMEOUT)",
                            started.elapsed().as_millis()
                        ),
                    );
                }
            }
        }
        self.stats()
    }

    /// The totals so far.
    pub fn stats(&self) -> Stats {
        Stats {
            endpoint: self.endpoint.clone(),
            protocol: match self.protocol {
                Protocol::Protobuf => "http/protobuf",
                Protocol::Json => "http/json",
            }
            .to_string(),
            exported: self.shared.exported.load(Ordering::SeqCst),
            dropped: self.shared.dropped.load(Ordering::SeqCst),
            requests: self.shared.requests.load(Ordering::SeqCst),
            error: self.shared.error.lock().ok().and_then(|e| e.clone()),
        }
    }
}

/// What the exporter thread posts with.
struct Poster {
    agent: ureq::Agent,
    endpoint: String,
    protocol: Protocol,
    headers: Vec<(String, String)>,
    resource: Resource,
    shared: Arc<Shared>,
    trust_error: Option<String>,
}

impl Poster {
    fn post(&self, spans: Vec<Span>) {
        let n = spans.len() as u64;
        let outcome = self.try_post(spans);
        // Settled either way: no longer pending (unless `finish` gave up on it already).
        let mut current = self.shared.pending.load(Ordering::SeqCst);
        while let Err(now) = self.shared.pending.compare_exchange(
            current,
            current.saturating_sub(n),
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            current = now;
        }
        match outcome {
            Ok(()) => {
                self.shared.exported.fetch_add(n, Ordering::SeqCst);
            }
            Err(why) => self.shared.fail(n, why),
        }
    }

    fn try_post(&self, spans: Vec<Span>) -> Result<(), String> {
        if let Some(e) = &self.trust_error {
            return Err(format!("OTEL_EXPORTER_OTLP_CERTIFICATE: {e}"));
        }
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: super::SCOPE.to_string(),
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        ..InstrumentationScope::default()
                    }),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let (body, content_type) = match self.protocol {
            Protocol::Protobuf => (request.encode_to_vec(), "application/x-protobuf"),
            Protocol::Json => (
                serde_json::to_vec(&request).map_err(|e| format!("cannot encode spans: {e}"))?,
                "application/json",
            ),
        };
        self.shared.requests.fetch_add(1, Ordering::SeqCst);
        let mut req = self
            .agent
            .post(&self.endpoint)
            .header("Content-Type", content_type)
            .header(
                "User-Agent",
                concat!("acode-run/", env!("CARGO_PKG_VERSION")),
            );
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        match req.send(&body[..]) {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(format!(
                "the collector at {} answered HTTP {}",
                self.endpoint,
                resp.status().as_u16()
            )),
            Err(e) => Err(format!(
                "cannot reach the collector at {}: {e}",
                self.endpoint
            )),
        }
    }
}
