//! Refuses a compiler known to miscompile this crate, and records the compiler that built it.
//!
//! Rust before 1.97 (the machines' default 1.95.0 among them) miscompiles a closure that takes a
//! value by argument and is called twice: the two arguments are merged, a double free in safe code,
//! in release builds only (rust-lang/rust#155241, #158830; docs/dependencies.md, "The
//! toolchain"). `rust-toolchain.toml` pins a good compiler, but rustup reads it only from the
//! directory cargo is started in: `cargo install --path tools/acode-run` run from a repository's
//! root builds with that root's toolchain. So the build itself refuses such a compiler, loudly,
//! instead of producing a binary that may free memory twice (issue 45).
//!
//! The check reads `$RUSTC --version` by hand and has no build dependency, so it runs before
//! anything else of the crate compiles. `ACODE_RUSTC_VERSION` and `ACODE_BUILD_TARGET` are what
//! `acode-run doctor` reports as the toolchain it was built with.

use std::process::Command;

/// The first release without the miscompilation (major, minor).
const FIXED_IN: (u64, u64) = (1, 97);

fn main() {
    // Not `rerun-if-env-changed=RUSTC`: cargo rebuilds on a change of compiler by itself, and a
    // variable set in one caller's environment and not another's would rebuild the crate for
    // nothing.
    println!("cargo:rerun-if-changed=build.rs");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = match Command::new(&rustc).arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => refuse(&format!(
            "`{} --version` failed: {}",
            rustc.to_string_lossy(),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => refuse(&format!(
            "cannot run `{} --version`: {e}",
            rustc.to_string_lossy()
        )),
    };
    match release(&version) {
        Some(found) if found >= FIXED_IN => {}
        Some((major, minor)) => refuse(&format!(
            "{version} is refused: Rust before {}.{} miscompiles acode-run (a closure that takes a \
             value by argument and is called twice frees it twice in release builds: \
             rust-lang/rust#155241, #158830; found {major}.{minor}). Build with the toolchain \
             rust-toolchain.toml pins: run cargo from inside acode-run's checkout (rustup reads \
             rust-toolchain.toml from the current directory), or name it: `cargo +1.99.1 install \
             --locked --path DIR` (docs/ci.md, docs/dependencies.md \"The toolchain\")",
            FIXED_IN.0, FIXED_IN.1
        )),
        None => refuse(&format!(
            "cannot read the compiler's version from {version:?} (expected `rustc X.Y.Z ...`)"
        )),
    }
    println!("cargo:rustc-env=ACODE_RUSTC_VERSION={version}");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=ACODE_BUILD_TARGET={target}");
}

/// `(major, minor)` of `rustc 1.99.1 (hash date)`, `rustc 1.97.0-nightly (...)`.
fn release(version: &str) -> Option<(u64, u64)> {
    let number = version.strip_prefix("rustc ")?.split([' ', '-']).next()?;
    let mut parts = number.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Stops the build with `why` (cargo prints a failed build script's stderr).
fn refuse(why: &str) -> ! {
    eprintln!("error: acode-run cannot be built with this compiler: {why}");
    std::process::exit(1)
}
