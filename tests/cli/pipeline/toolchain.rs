//! The install recipe cannot skip the pin: a copy of the crate built with Rust 1.95.0 (the
//! machines' default, which miscompiles it: docs/dependencies.md, "The toolchain") fails loudly —
//! cargo refuses it by `rust-version`, and with `--ignore-rust-version` the build script refuses it
//! naming the bug and the fix — instead of building.
//!
//! The second check builds the crate's `[package]` (its `rust-version` and `build.rs`) with an
//! empty library instead of the whole crate: cargo schedules a package's build script after most
//! of its dependencies, so the whole crate would compile a minute of dependencies with 1.95.0
//! before the script ran; what the script refuses does not depend on them.

use std::path::Path;
use std::process::Command;

use crate::harness::*;

/// The toolchain known to miscompile the crate, installed on these machines as the default.
const BAD: &str = "1.95.0";

/// Copies what cargo needs to build the crate (manifest, lock file, build script, sources) to `to`.
fn copy_crate(to: &Path) {
    for file in ["Cargo.toml", "Cargo.lock", "build.rs"] {
        std::fs::copy(repo().join(file), to.join(file)).unwrap();
    }
    copy_tree(&repo().join("src"), &to.join("src"));
    copy_tree(&repo().join("tests/support"), &to.join("tests/support"));
}

/// `cargo +1.95.0 check --offline ARGS` in `dir` with a target directory of its own.
fn check_with_bad_toolchain(dir: &Path, extra: &[&str]) -> std::process::Output {
    Command::new("cargo")
        .arg(format!("+{BAD}"))
        .args(["check", "--offline", "--quiet"])
        .args(extra)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTC")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .output()
        .expect("cargo runs")
}

#[test]
fn a_build_with_a_compiler_that_miscompiles_the_crate_is_refused_with_the_reason() {
    let installed = Command::new("rustup")
        .args(["run", BAD, "rustc", "--version"])
        .output();
    if !installed.as_ref().is_ok_and(|o| o.status.success()) {
        acode_run::testing::skip(
            &format!("Rust {BAD}"),
            "the test builds a copy of the crate with the compiler the build must refuse",
        );
        return;
    }
    let t = TestDir::new();
    let dir = t.root.join("crate");
    std::fs::create_dir_all(&dir).unwrap();
    copy_crate(&dir);

    // cargo itself, by `rust-version`.
    let out = check_with_bad_toolchain(&dir, &[]);
    let err = stderr(&out);
    assert!(!out.status.success(), "1.95.0 built the crate:\n{err}");
    assert!(
        err.contains("rustc 1.95.0 is not supported") && err.contains("requires rustc 1.97"),
        "{err}"
    );

    // Past `rust-version`, the build script, with the bug and the way out.
    let package = t.root.join("package");
    std::fs::create_dir_all(package.join("src")).unwrap();
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let table = manifest
        .split("\n[")
        .next()
        .filter(|t| t.starts_with("[package]"))
        .expect("Cargo.toml starts with [package]");
    std::fs::write(
        package.join("Cargo.toml"),
        format!("{table}\n[workspace]\n"),
    )
    .unwrap();
    std::fs::copy(repo().join("build.rs"), package.join("build.rs")).unwrap();
    std::fs::write(package.join("src/lib.rs"), "").unwrap();
    let out = check_with_bad_toolchain(&package, &["--ignore-rust-version"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "1.95.0 built the crate:\n{err}");
    for needle in [
        "acode-run cannot be built with this compiler: rustc 1.95.0",
        "is refused: Rust before 1.97 miscompiles acode-run",
        "rust-lang/rust#155241, #158830",
        "cargo +1.99.1 install --locked --path DIR",
    ] {
        assert!(err.contains(needle), "no {needle:?} in:\n{err}");
    }
    // Refused before the crate itself compiled: no library of it in the target directory.
    let built = walkdir::WalkDir::new(package.join("target"))
        .into_iter()
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().starts_with("libacode_run"));
    assert!(!built, "the crate was compiled by 1.95.0");
    // From inside a checkout (rust-toolchain.toml beside the manifest), cargo takes the pinned
    // compiler, which the script lets through.
    std::fs::copy(
        repo().join("rust-toolchain.toml"),
        package.join("rust-toolchain.toml"),
    )
    .unwrap();
    let out = Command::new("cargo")
        .args(["check", "--offline", "--quiet"])
        .current_dir(&package)
        .env("CARGO_TARGET_DIR", package.join("target"))
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The toolchain `rust-toolchain.toml` pins (`1.99.1`).
pub fn pinned_channel() -> String {
    let pinned = std::fs::read_to_string(repo().join("rust-toolchain.toml")).unwrap();
    pinned
        .lines()
        .find_map(|l| l.strip_prefix("channel = "))
        .expect("rust-toolchain.toml names a channel")
        .trim_matches('"')
        .to_string()
}

#[test]
fn the_binary_says_which_compiler_built_it() {
    let t = TestDir::new();
    let out = t.run(&["doctor", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("doctor --json printed no JSON ({e}):\n{}", stderr(&out)));
    let rustc = doc["toolchain"]["rustc"].as_str().unwrap_or_default();
    let channel = pinned_channel();
    assert!(
        rustc.starts_with(&format!("rustc {channel} ")),
        "built with {rustc:?}, pinned {channel}"
    );
}
