//! OpenTelemetry for a run (docs/observability.md): read the standard variables, put the trace
//! sink beside the run's other progress outputs, hand the executor the W3C trace context, and
//! after the run flush (bounded) and record what the export came to.

use std::sync::Arc;

use crate::events::otel::{Exporter, OtelConfig, OtelSink, RunFacts, Stats, TraceContext};
use crate::executor::{Driven, Executor, Fanout, ProgressCallback};
use crate::store::Store;

/// What a run's tracing is: the sink when exporting, the trace context (also when only passing a
/// caller's `TRACEPARENT` on to commands), and a configuration that could not be used.
pub struct Tracing {
    sink: Option<Arc<OtelSink>>,
    trace: Option<TraceContext>,
    problem: Option<String>,
}

impl Tracing {
    /// Tracing as the environment `env` asks for it, for a run whose records go through
    /// `redactor` and whose sink is told `facts` (made only when exporting).
    pub fn from_env(
        redactor: &Arc<crate::redact::Redactor>,
        facts: impl FnOnce() -> RunFacts,
        env: impl Fn(&str) -> Option<String>,
    ) -> Tracing {
        let (config, problem) = match OtelConfig::from_env(&env) {
            Ok(c) => (c, None),
            Err(e) => (None, Some(e)),
        };
        let trace = TraceContext::for_run(
            env("TRACEPARENT").as_deref(),
            env("TRACESTATE").as_deref(),
            config.is_some(),
        );
        let (Some(config), Some(ctx)) = (config, trace.clone()) else {
            return Tracing {
                sink: None,
                trace,
                problem,
            };
        };
        let redactor = redactor.clone();
        // Header values are credentials (an API key for the collector): never in a record.
        redactor.add_values(
            config
                .headers
                .iter()
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>(),
        );
        let facts = facts();
        let sink = OtelSink::new(ctx, facts, redactor, Exporter::start(&config));
        Tracing {
            sink: Some(Arc::new(sink)),
            trace,
            problem,
        }
    }

    /// `executor` with the trace context and, when exporting, the sink beside its progress.
    pub fn attach(&self, mut executor: Executor) -> Executor {
        if let Some(sink) = &self.sink {
            let callbacks = executor.callbacks_mut();
            let outputs: Vec<Box<dyn ProgressCallback>> =
                vec![Box::new(callbacks.progress.clone()), Box::new(sink.clone())];
            callbacks.progress = Arc::new(Fanout(outputs));
        }
        executor.with_trace(self.trace.clone())
    }

    /// Flushes (at most the export timeout) and records on run `run_id` what the export came to;
    /// `None` when nothing was to be exported.
    pub fn finish(self, run_id: &str, store: &mut Store) -> Option<Stats> {
        let stats = match (&self.sink, self.problem) {
            (Some(sink), _) => sink.finish(),
            (None, Some(problem)) => Stats {
                error: Some(format!("traces not exported: {problem}")),
                ..Stats::default()
            },
            (None, None) => return None,
        };
        let json = serde_json::to_string(&stats).unwrap_or_default();
        // The run is recorded already; a failure to note its telemetry must not change its outcome.
        let _ = store.record_telemetry(run_id, &json);
        Some(stats)
    }
}
