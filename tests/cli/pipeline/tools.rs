//! The CI tools the pipeline tests run, installed once from the package registries (the ones npm's
//! and pip's own configuration name) into `target/tmp/ci-tools-HASH/` (HASH of the pinned
//! versions, so a new pin installs afresh) and kept there; listed in docs/dependencies.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Cargo settings for the release builds the tests start (the action's first `cargo install`,
/// `scripts/image.sh`): unoptimised, without LTO, in many codegen units. The tests check what the
/// steps do with the binary, not the optimiser; a release build of the crate takes minutes on two
/// cores, which CI would pay twice (glibc for the action, musl for the image). The optimised
/// builds are what docs/ci.md's times measure (by hand).
pub const QUICK_RELEASE: [(&str, &str); 3] = [
    ("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0"),
    ("CARGO_PROFILE_RELEASE_LTO", "off"),
    ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "256"),
];

/// npm packages, pinned.
const NPM: &[&str] = &["@action-validator/cli@0.6.0", "gitlab-ci-local@4.65.1"];
/// PyPI packages, pinned.
const PYPI: &[&str] = &["zizmor==1.32.0", "check-jsonschema==0.39.0"];

fn dir() -> PathBuf {
    // FNV-1a of the pins.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in NPM.iter().chain(PYPI).flat_map(|p| p.bytes().chain([0])) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ci-tools-{h:016x}"))
}

static INSTALLED: Mutex<bool> = Mutex::new(false);

/// Installs every tool when not yet there (once per test process, under a lock).
fn install() {
    let mut done = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return;
    }
    let d = dir();
    if !d.join(".complete").exists() {
        std::fs::create_dir_all(&d).unwrap();
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(d.join("node"))
            .args(NPM)
            .output()
            .expect("npm runs (apt-get install npm)");
        assert!(out.status.success(), "npm install: {out:?}");
        let venv = d.join("venv");
        let out = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .unwrap();
        assert!(out.status.success(), "python3 -m venv: {out:?}");
        let out = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(PYPI)
            .output()
            .unwrap();
        assert!(out.status.success(), "pip install: {out:?}");
        std::fs::write(d.join(".complete"), "").unwrap();
    }
    *done = true;
}

/// The command of an npm tool (`action-validator`, `gitlab-ci-local`).
pub fn node(bin: &str) -> Command {
    install();
    Command::new(dir().join("node/node_modules/.bin").join(bin))
}

/// The command of a PyPI tool (`zizmor`, `check-jsonschema`).
pub fn python(bin: &str) -> Command {
    install();
    Command::new(dir().join("venv/bin").join(bin))
}
