//! The ReAct text protocol: `llm::react::parse` (what the agent loop calls on a model's answer
//! under `--tool-protocol react`), then the loop's admission of the action.
//!
//! Properties: never a panic; an action names a non-empty tool and its input is an object (a
//! string input only when it holds an object); a refusal is a message for the model; then
//! `acode_run_fuzz::admit`.
#![no_main]

use acode_run::llm::react::{self, ReactStep};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(content) = std::str::from_utf8(data) else {
        return;
    };
    match react::parse(content) {
        Err(e) => assert!(!e.is_empty()),
        Ok(ReactStep::Final { .. }) => {}
        Ok(ReactStep::Action { tool, input, .. }) => {
            assert!(!tool.is_empty() && tool.trim() == tool, "tool {tool:?}");
            assert!(input.is_object(), "action_input {input}");
            acode_run_fuzz::admit(&tool, &input, None);
        }
    }
});
