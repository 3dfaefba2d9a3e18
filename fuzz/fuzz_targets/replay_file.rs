//! A replay file (`run --replay FILE`, docs/replay.md): committed beside a plan, so a pull request
//! can change it. The fuzzer's bytes are written to a file and read by
//! `runner::replay::read_source` (what `run --replay FILE` calls: the size bound, UTF-8, then
//! `ReplaySource::parse_jsonl`), checked by `ReplaySource::problems` (what refuses an unreplayable
//! recording before anything runs), and then answered from, as a replay does, by a lenient
//! `ReplayClient` to agent steps that offer only `file_read`: each answer parsed by its provider's
//! parser and each call it names put through the agent loop's admission.
//!
//! Properties, within a 10 s deadline: never a panic; a refused file has at least one problem and
//! each names its line (`line N:`), the file, or says the file is empty; a file that reads keeps
//! each step's turns in order, numbered from 1, none twice, each with its line, and writes back
//! (`to_jsonl`) to text that reads equal; every problem has a message; a replay answers each
//! recorded turn (or fails it with its recorded error or a parse error), never a turn beyond the
//! recording (`replay_diverged`); ids in one answer are unique; a call naming a tool the step
//! does not offer — any tool but `file_read` — is refused as not offered, and a call admitted
//! names `file_read` with arguments its schema accepts (`acode_run_fuzz::admit_in`); under a
//! recorded `"tool_protocol": "react"` the same for the action each answer's text names.
#![no_main]

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use acode_run::llm::react::{self, ReactStep};
use acode_run::llm::replay::{ReplayClient, ReplayOptions, ReplaySource};
use acode_run::llm::{ChatRequest, LlmClient, LlmError, Message, ToolSpec};
use libfuzzer_sys::fuzz_target;

/// The one tool the replayed steps offer.
fn allowed() -> &'static [String] {
    static ALLOWED: OnceLock<Vec<String>> = OnceLock::new();
    ALLOWED.get_or_init(|| vec!["file_read".to_string()])
}

fn request() -> ChatRequest {
    let (registry, _) = acode_run_fuzz::offered();
    ChatRequest::new(
        "",
        vec![
            Message::system("fuzz"),
            Message::user("Read README.md."),
        ],
    )
    .with_tools(ToolSpec::from_registry(registry, &["file_read"]))
}

fn check(data: Vec<u8>) {
    let dir = acode_run_fuzz::scratch("replay-file");
    let path = dir.join("plan.replay.jsonl");
    std::fs::write(&path, &data).expect("scratch file");
    let source = match acode_run::runner::replay::read_source(&path) {
        Err(problems) => {
            assert!(!problems.is_empty(), "a refusal without a problem");
            let shown = path.display().to_string();
            for p in &problems {
                assert!(
                    p.starts_with("line ")
                        || p.contains(&shown)
                        || p == "the file is empty: no replay header",
                    "a problem that names no line: {p}"
                );
            }
            return;
        }
        Ok(source) => source,
    };
    let mut seen = HashSet::new();
    for pair in source.turns.windows(2) {
        assert!(
            (&pair[0].step, pair[0].turn) < (&pair[1].step, pair[1].turn),
            "turns out of order"
        );
    }
    for t in &source.turns {
        assert!(t.turn >= 1 && t.line >= 2, "turn {} on line {}", t.turn, t.line);
        assert!(seen.insert((t.step.clone(), t.turn)), "a turn twice");
    }
    // Written back, it reads the same.
    let mut back = ReplaySource::parse_jsonl(&source.to_jsonl()).expect("written back, it reads");
    let mut first = source.clone();
    for t in back.turns.iter_mut().chain(first.turns.iter_mut()) {
        t.line = 0;
    }
    assert_eq!(back, first, "to_jsonl and parse_jsonl disagree");
    let problems = source.problems();
    assert!(problems.iter().all(|p| !p.is_empty()));
    if !problems.is_empty() {
        return;
    }
    // Answered from, as a lenient replay answers agent steps; a run recorded with the ReAct
    // protocol has its actions in the answers' text, which the loop parses (`llm::react::parse`).
    let react = source.header.settings.get("tool_protocol") == Some(&serde_json::json!("react"));
    let steps: Vec<(String, usize)> = source
        .header
        .steps
        .iter()
        .map(|s| {
            let n = source.turns.iter().filter(|t| t.step == s.step).count();
            (s.step.clone(), n)
        })
        .collect();
    let client = ReplayClient::new(
        source,
        ReplayOptions {
            lenient: true,
            redactor: Arc::new(acode_run::redact::Redactor::new()),
            workspace: dir.display().to_string(),
            origin: "file plan.replay.jsonl".to_string(),
        },
    );
    let request = request();
    for (step, turns) in steps {
        let Some(answers) = client.for_step(&step) else {
            panic!("a replay answers every step on its own");
        };
        for turn in 1..=turns + 1 {
            match answers.chat(&request) {
                Ok(response) => {
                    assert!(turn <= turns, "an answer beyond the recording");
                    let mut ids = HashSet::new();
                    for call in &response.tool_calls {
                        assert!(!call.id.is_empty(), "a call without an id");
                        assert!(ids.insert(call.id.clone()), "two calls with one id");
                        acode_run_fuzz::admit_in(
                            allowed(),
                            &call.name,
                            &call.arguments,
                            call.parse_error_feedback(),
                        );
                    }
                    if react
                        && let Some(text) = response.content.as_deref()
                        && let Ok(ReactStep::Action { tool, input, .. }) = react::parse(text)
                    {
                        acode_run_fuzz::admit_in(allowed(), &tool, &input, None);
                    }
                }
                Err(LlmError::ReplayDiverged { message }) => {
                    assert_eq!(turn, turns + 1, "a lenient replay diverged: {message}");
                    assert!(message.contains(&format!("step `{step}`")), "{message}");
                }
                Err(e) => {
                    assert!(turn <= turns, "{e}");
                    assert!(!e.to_string().is_empty());
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let data = data.to_vec();
    acode_run_fuzz::within(Duration::from_secs(10), "a replay file", move || {
        check(data)
    });
});
