//! The `acode-run` binary: everything lives in the library's `cli` module so it can be tested.

fn main() {
    // Inside a bwrap sandbox whose commands may reach allowed hosts, this binary is re-executed as
    // the network forwarder: it passes its environment to the command, so it goes first.
    acode_run::net::forward::main_if_requested();
    // Inside the run's bwrap sandbox, this binary is re-executed as the supervisor that starts
    // the run's commands (one sandbox per run instead of one per command).
    acode_run::process::supervisor::main_if_requested();
    // First, while single-threaded: keep the runner's secrets (approval key, LLM keys, whatever CI
    // put in its environment) out of its commands' reach.
    acode_run::process::harden_runner();
    let code = acode_run::cli::main_with_args(std::env::args_os().skip(1).collect());
    std::process::exit(code);
}
