//! The check-then-open race, attacked for real: while the real binary runs a plan of 400
//! `file_write`s into `flip/`, a helper thread swaps `flip` between a real directory and a symlink
//! to a directory outside the workspace as fast as it can (`renameat2(RENAME_EXCHANGE)`, so `flip`
//! is always one or the other). Whatever the interleaving, nothing may be created or changed
//! outside (issue 7, item 1).

use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

const WRITES: usize = 400;

/// Atomically exchanges two names (one a directory, the other a symlink).
fn exchange(a: &CString, b: &CString) -> bool {
    // SAFETY: valid NUL-terminated paths; AT_FDCWD with absolute paths.
    unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        ) == 0
    }
}

#[test]
fn flipping_a_directory_to_a_link_outside_during_400_writes_writes_nothing_outside() {
    let t = TestDir::new();
    std::fs::create_dir_all(t.ws.join("flip")).unwrap();
    // The other half of the swap: a symlink to outside, parked under another name.
    std::os::unix::fs::symlink(&t.outside, t.ws.join("flip-parked")).unwrap();
    let mut steps = vec![json!({"step_id": "go", "tool": "file_write",
        "arguments": {"path": "go.txt", "contents": "go"}})];
    for i in 0..WRITES {
        steps.push(json!({
            "step_id": format!("w{i}"),
            "tool": "file_write",
            "arguments": {"path": format!("flip/f{i}.txt"), "contents": format!("pwned {i}\n")},
            "on_failure": "continue",
            "depends_on": ["go"],
        }));
    }
    let plan = t.plan("race.json", &json!({"plan_id": "race", "steps": steps}));
    t.approve(&plan);

    // The flipper starts once the run is past validation (its first step wrote go.txt) and flips
    // until the run ends.
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicU64::new(0));
    let flipper = {
        let (stop, flips) = (stop.clone(), flips.clone());
        let go = t.ws.join("go.txt");
        let a = CString::new(t.ws.join("flip").to_str().unwrap()).unwrap();
        let b = CString::new(t.ws.join("flip-parked").to_str().unwrap()).unwrap();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !go.exists() && !stop.load(Ordering::Relaxed) {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "run never started"
                );
                std::thread::yield_now();
            }
            while !stop.load(Ordering::Relaxed) {
                assert!(exchange(&a, &b), "{}", std::io::Error::last_os_error());
                flips.fetch_add(1, Ordering::Relaxed);
            }
            // Leave `flip` as the real directory.
            if std::fs::symlink_metadata(std::path::Path::new(a.to_str().unwrap()))
                .unwrap()
                .file_type()
                .is_symlink()
            {
                assert!(exchange(&a, &b));
            }
        })
    };
    let out = t.run(&["run", plan.to_str().unwrap(), "--confirm", "auto-approve"]);
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    let err = stderr(&out);

    t.assert_outside_untouched();
    let flips = flips.load(Ordering::Relaxed);
    assert!(flips > 100, "the flipper barely ran ({flips} flips): {err}");
    // Each write either landed in the real directory or was refused; count both to show the race
    // was really run on both sides.
    let written = std::fs::read_dir(t.ws.join("flip")).unwrap().count();
    let db = t.db();
    let refused: i64 = q(
        &db,
        "SELECT count(*) FROM executions WHERE tool_name = 'file_write' AND success = 0",
    );
    let by_kernel: i64 = q(
        &db,
        "SELECT count(*) FROM executions WHERE error_message LIKE '%refused by the kernel%' \
         OR error_message LIKE '%not inside the workspace%'",
    );
    eprintln!(
        "race: {flips} flips, {written} writes landed inside, {refused} refused ({by_kernel} by the kernel check)"
    );
    assert!(written > 0, "no write succeeded: {err}");
    assert!(
        refused > 0,
        "no write was refused: did the swap happen? {err}"
    );
    assert_eq!(written as i64 + refused, WRITES as i64, "{err}");
}
