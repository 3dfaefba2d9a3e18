//! What the fuzz targets share: an independent duplicate-key detector (so "duplicate keys are
//! always refused" is checked against something that is not acode-run's own
//! `input::check_unique_keys`), a scratch directory per process, and a deadline runner.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// Whether `bytes`, as one JSON document, has an object with the same key twice (after
/// unescaping, at any depth): `None` when it is not a JSON document serde_json accepts.
pub fn has_duplicate_key(bytes: &[u8]) -> Option<bool> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let found = Dup.deserialize_in(&mut de).ok()?;
    de.end().ok()?;
    Some(found)
}

/// A visitor that walks any JSON value and answers whether some object repeats a key.
struct Dup;

impl Dup {
    fn deserialize_in<'de, D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

struct DupSeed;

impl<'de> de::DeserializeSeed<'de> for DupSeed {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(Dup)
    }
}

impl<'de> Visitor<'de> for Dup {
    type Value = bool;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut found = false;
        while let Some(d) = seq.next_element_seed(DupSeed)? {
            found |= d;
        }
        Ok(found)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut keys = std::collections::HashSet::new();
        let mut found = false;
        while let Some(k) = map.next_key::<String>()? {
            found |= !keys.insert(k);
            found |= map.next_value_seed(DupSeed)?;
        }
        Ok(found)
    }
}

/// A directory of this process's own under the system temp dir, made once, removed by nobody
/// (the fuzzer's process is short-lived; `scripts/fuzz-smoke.sh` removes them afterwards).
pub fn scratch(name: &str) -> &'static Path {
    static DIRS: OnceLock<std::sync::Mutex<Vec<(String, &'static Path)>>> = OnceLock::new();
    let dirs = DIRS.get_or_init(Default::default);
    let mut dirs = dirs.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = dirs.iter().find(|(n, _)| n == name) {
        return p;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("acode-fuzz-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let dir: &'static Path = Box::leak(dir.into_boxed_path());
    dirs.push((name.to_string(), dir));
    dir
}

/// Runs `f` on a thread and panics (a libFuzzer crash, with `what` in the message) when it has
/// not finished within `limit`: the targets' "never a hang" property, checked inside the target
/// rather than left to libFuzzer's process-wide `-timeout`.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The thread panicked: let its panic be the crash.
            match handle.join() {
                Err(p) => std::panic::resume_unwind(p),
                Ok(()) => unreachable!("the thread ended without sending"),
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("hang: {what} did not finish within {limit:?}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_found_after_unescaping_at_any_depth() {
        assert_eq!(has_duplicate_key(br#"{"a":1,"b":2}"#), Some(false));
        assert_eq!(has_duplicate_key(br#"{"a":1,"a":2}"#), Some(true));
        assert_eq!(
            has_duplicate_key(br#"[{"x":{"a":1,"\u0061":2}}]"#),
            Some(true)
        );
        assert_eq!(has_duplicate_key(br#"{"a":1"#), None);
    }
}

/// The tools an agent step is offered in the LLM targets: every built-in tool.
pub fn offered() -> &'static (
    acode_run::tools::ToolRegistry,
    Vec<acode_run::llm::ToolSpec>,
) {
    static OFFERED: OnceLock<(
        acode_run::tools::ToolRegistry,
        Vec<acode_run::llm::ToolSpec>,
    )> = OnceLock::new();
    OFFERED.get_or_init(|| {
        let registry = acode_run::tools::ToolRegistry::builtin();
        let names: Vec<&str> = registry.names().collect();
        let specs = acode_run::llm::ToolSpec::from_registry(&registry, &names);
        (registry, specs)
    })
}

/// The names the agent step offers in the LLM targets (every built-in tool), as the loop's
/// `allowed` list.
pub fn allowed() -> &'static [String] {
    static ALLOWED: OnceLock<Vec<String>> = OnceLock::new();
    ALLOWED.get_or_init(|| offered().1.iter().map(|s| s.name.clone()).collect())
}

/// What the agent loop does with one call the model asked for, by the production functions in
/// the loop's order: a call with a parse error is refused with `parse_error_feedback` (passed in
/// as `parse_error`); a tool the step does not offer is refused (`executor::agent::not_offered`);
/// then the call's admission without a run (`executor::call::screen`, what `StepContext::admit`
/// calls before the confirmation gate): unknown tool, schema, the tool's own `check`. Returns
/// whether the call would reach the confirmation gate and run.
///
/// Properties: every refusal has a message; a call admitted names a tool that is offered and
/// registered, and has an object as arguments that its schema accepts; a call whose tool is not
/// registered, or whose arguments the schema (`tools::schema::validate`, checked again here)
/// rejects, is refused with `invalid_arguments`.
pub fn admit(name: &str, arguments: &serde_json::Value, parse_error: Option<String>) -> bool {
    admit_in(allowed(), name, arguments, parse_error)
}

/// [`admit`] for a step that offers only `allowed` (names of built-in tools): a call naming any
/// other tool, registered or not, is refused as not offered.
pub fn admit_in(
    allowed: &[String],
    name: &str,
    arguments: &serde_json::Value,
    parse_error: Option<String>,
) -> bool {
    use acode_run::error::ErrorKind;
    let (registry, _) = offered();
    if let Some(feedback) = parse_error {
        assert!(!feedback.is_empty());
        return false;
    }
    if let Some(refusal) = acode_run::executor::agent::not_offered(allowed, name) {
        assert!(
            refusal.contains(name),
            "the refusal does not name {name:?}: {refusal}"
        );
        assert!(
            !allowed.iter().any(|a| a == name),
            "the offered tool {name} was refused as not offered"
        );
        return false;
    }
    assert!(
        allowed.iter().any(|a| a == name),
        "{name} is not offered, and was not refused as not offered"
    );
    let ws = workspace();
    let policy = acode_run::policy::Policy::default();
    let ctx = acode_run::plan::ValidationContext {
        registry,
        workspace: ws,
        policy: &policy,
    };
    let schema_errors = registry
        .lookup(name)
        .map(|(_, schema)| acode_run::tools::schema::validate(schema, arguments, "arguments"));
    match ctx.with_tool_context(|c| acode_run::executor::call::screen(registry, name, arguments, c))
    {
        Ok(_) => {
            assert!(
                allowed.iter().any(|a| a == name),
                "{name} was admitted but is not offered"
            );
            assert_eq!(
                schema_errors.as_deref(),
                Some(&[][..]),
                "{name} was admitted with arguments its schema rejects: {arguments}"
            );
            assert!(
                arguments.is_object(),
                "the schema of {name} accepted arguments that are not an object: {arguments}"
            );
            true
        }
        Err((kind, message)) => {
            assert!(!message.is_empty(), "a refusal of {name} without a message");
            if schema_errors.as_ref().is_none_or(|e| !e.is_empty()) {
                assert_eq!(
                    kind,
                    ErrorKind::InvalidArguments,
                    "{name} with arguments its schema rejects was refused as {kind}: {message}"
                );
            }
            false
        }
    }
}

/// An empty workspace for tools' checks.
pub fn workspace() -> &'static acode_run::workspace::Workspace {
    static WS: OnceLock<acode_run::workspace::Workspace> = OnceLock::new();
    WS.get_or_init(|| acode_run::workspace::Workspace::new(scratch("tool-ws")).unwrap())
}

/// The signature every provider's `parse_response` shares (`llm::{openai, anthropic, ollama}`).
pub type ParseResponse = fn(
    &str,
    &str,
    &acode_run::llm::ChatRequest,
    &mut acode_run::llm::parse::IdAllocator,
) -> Result<acode_run::llm::ChatResponse, acode_run::llm::LlmError>;

/// One provider target's whole body: `data` as a 2xx answer body (UTF-8 only, as the client
/// reads it) through that provider's `parse`, with the request [`request`] offers, then
/// [`check_answer`].
pub fn provider_answer(data: &[u8], parse: ParseResponse) {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    let counter = std::sync::atomic::AtomicU64::new(0);
    let mut ids = acode_run::llm::parse::IdAllocator::new(&counter);
    check_answer(parse(body, "http://127.0.0.1:9/fuzz", &request(), &mut ids));
}

/// Checks one provider's parse of a 2xx body (`parse_response`): ids are unique and non-empty;
/// a call without a parse error has a name and an object as arguments; a call with one gets the
/// feedback text the loop sends back; then [`admit`] for each.
pub fn check_answer(parsed: Result<acode_run::llm::ChatResponse, acode_run::llm::LlmError>) {
    let response = match parsed {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let mut ids = std::collections::HashSet::new();
    for call in &response.tool_calls {
        assert!(!call.id.is_empty(), "a call without an id");
        assert!(
            ids.insert(call.id.clone()),
            "two calls with id {:?}",
            call.id
        );
        let feedback = call.parse_error_feedback();
        assert_eq!(feedback.is_some(), call.parse_error.is_some());
        if call.parse_error.is_none() {
            assert!(
                !call.name.is_empty(),
                "a call without a name and no parse error"
            );
            assert!(
                call.arguments.is_object(),
                "a call's arguments are not an object and no parse error says so: {}",
                call.arguments
            );
        }
        admit(&call.name, &call.arguments, feedback);
    }
}

/// A request offering every built-in tool, as an agent step's would.
pub fn request() -> acode_run::llm::ChatRequest {
    acode_run::llm::ChatRequest::new("fuzz-model", Vec::new()).with_tools(offered().1.clone())
}
