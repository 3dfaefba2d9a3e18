//! The `acode-run` binary: everything lives in the library's `cli` module so it can be tested.

fn main() {
    let code = acode_run::cli::main_with_args(std::env::args_os().skip(1).collect());
    std::process::exit(code);
}
