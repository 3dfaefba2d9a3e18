//! The `acode-run` binary: everything lives in the library's `cli` module so it can be tested.

fn main() {
    // First, while single-threaded: keep the runner's secrets (approval key, LLM keys, whatever CI
    // put in its environment) out of its commands' reach.
    acode_run::sandbox::process::harden_runner();
    let code = acode_run::cli::main_with_args(std::env::args_os().skip(1).collect());
    std::process::exit(code);
}
