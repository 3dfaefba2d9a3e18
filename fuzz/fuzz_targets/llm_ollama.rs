//! The ollama provider's 2xx answer body: `llm::ollama::parse_response` (what the client calls on
//! the body it received), then the agent loop's admission of each call (`acode_run_fuzz::admit`).
//!
//! Properties: see `acode_run_fuzz::check_answer` and `acode_run_fuzz::admit`.
#![no_main]

use std::sync::atomic::AtomicU64;

use acode_run::llm::{ollama, parse::IdAllocator};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    let counter = AtomicU64::new(0);
    let mut ids = IdAllocator::new(&counter);
    let request = acode_run_fuzz::request();
    let parsed = ollama::parse_response(body, "http://127.0.0.1:9/fuzz", &request, &mut ids);
    acode_run_fuzz::check_answer(parsed);
});
