//! The anthropic provider's 2xx answer body: `llm::anthropic::parse_response` (what the client calls on
//! the body it received), then the agent loop's admission of each call (`acode_run_fuzz::admit`).
//!
//! Properties: see `acode_run_fuzz::check_answer` and `acode_run_fuzz::admit`.
#![no_main]

use acode_run::llm::anthropic;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| acode_run_fuzz::provider_answer(data, anthropic::parse_response));
