//! Embedding acode-run: run an approved plan from Rust with the command line's safety by default.
//!
//! `cargo run --example embed [WORKSPACE]` writes a small plan next to a fresh workspace (or the
//! one given), approves it (recording the decision as the CLI does), and runs it through
//! [`PlanRunner`] with a confirmation callback that
//! approves and a progress callback that prints each event type.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use acode_run::events::Event;
use acode_run::executor::{
    ConfirmationCallback, ConfirmationRequest, Decision, Driven, ProgressCallback,
};
use acode_run::plan::{self, AuthStatus};
use acode_run::runner::{DecisionRequest, PlanRunner, RunOptions};

/// Says yes to every confirmation, printing what it approved.
struct ApproveAndSay;

impl ConfirmationCallback for ApproveAndSay {
    fn request_confirmation(&self, request: &ConfirmationRequest) -> Decision {
        println!("confirm: {} {} -> approve", request.step_id, request.tool);
        Decision::Approve
    }
}

/// Counts and prints events.
#[derive(Default)]
struct Events(AtomicUsize);

impl ProgressCallback for Events {
    fn on_event(&self, event: &Event) {
        self.0.fetch_add(1, Ordering::SeqCst);
        println!("event: {}", event.kind.type_name());
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Under bwrap this binary is re-executed inside the sandbox as the network forwarder and as
    // the supervisor of the run's commands; these return at once otherwise.
    acode_run::net::forward::main_if_requested();
    acode_run::process::supervisor::main_if_requested();
    let root = match std::env::args().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::env::temp_dir().join(format!("acode-embed-{}", std::process::id())),
    };
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("old.txt"), "to be removed\n")?;
    let plan_path = root.join("embed.json");
    std::fs::write(
        &plan_path,
        r#"{ "plan_id": "embed",
  "steps": [
    { "step_id": "write", "tool": "file_write", "arguments": { "path": "hello.txt", "contents": "hello\n" } },
    { "step_id": "delete", "tool": "file_delete", "arguments": { "path": "old.txt" } } ] }
"#,
    )?;
    // A reviewer approves these exact bytes. Recorded like `acode-run approve` records it: in the
    // execution database (decisions table) and `embed.json.approval`, signed with the approval key
    // when one is set, by the library's rules (a standing rejection is not overridden).
    let mut options = RunOptions::default();
    options.approve = Some(DecisionRequest {
        status: AuthStatus::Approved,
        by: Some("embed-example".to_string()),
        reason: Some("approved by examples/embed.rs".to_string()),
        may_override: false,
        key: plan::auth::approval_key()?,
        ssh: Default::default(),
    });

    let events = Arc::new(Events::default());
    let result = PlanRunner::prepare(&ws, &plan_path, options)?
        .with_confirmation(Arc::new(ApproveAndSay))
        .with_progress(events.clone())
        .run()?;
    println!(
        "run {} {} (exit {}), {} events",
        result.run_id,
        result.status,
        result.exit_code,
        events.0.load(Ordering::SeqCst)
    );
    std::process::exit(result.exit_code);
}
