//! The runner's side of the supervisor wire: `process::supervisor::client::Remote` (what
//! `Supervisor::launch` returns for a command handed to a shim, and what the runner waits on)
//! reading the five-byte reports shims send back, over real `SOCK_STREAM` socket pairs, several
//! slots at once as in a `--jobs` run. One slot's shim sends the fuzzer's bytes (a corrupt,
//! truncated or overlong report), the others a well-formed one; then every slot whose command
//! ended well goes back to the pool, as in production, and takes the next command.
//!
//! Input: byte 0 picks the number of slots (2 to 4), byte 1 the corrupt one, byte 2 whether its
//! shim goes away after writing; the rest is what that shim writes.
//!
//! Properties: nothing waits past a deadline (`ended` never blocks; `wait` ends once the shim
//! has gone or a whole report came); the corrupt slot's command ends as its first five bytes say
//! (an unknown tag is `Lost`), or `Lost` when the shim went away before five; every other slot's
//! command ends exactly as its shim reported; and a slot taken from the pool for the next command
//! reads that command's report, never bytes left over from the one before.
#![no_main]

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acode_run::process::supervisor::wire;
use acode_run::process::supervisor::{Ended, Remote};
use libfuzzer_sys::fuzz_target;

/// A report as a shim writes it: a tag and a little-endian 32-bit value.
fn report(tag: u8, value: i32) -> Vec<u8> {
    let mut r = vec![tag];
    r.extend_from_slice(&value.to_le_bytes());
    r
}

/// What five bytes of report mean, decoded here independently of the client.
fn meaning(b: &[u8]) -> Ended {
    let value = i32::from_le_bytes([b[1], b[2], b[3], b[4]]);
    match b[0] {
        wire::EXITED => Ended::Exited(value),
        wire::FAILED => Ended::Failed(value),
        _ => Ended::Lost,
    }
}

fn write(fd: &OwnedFd, bytes: &[u8]) {
    let mut f = std::fs::File::from(fd.try_clone().expect("dup"));
    // A peer that closed is no error here: the runner's reading is what is checked.
    let _ = f.write_all(bytes);
}

fuzz_target!(|data: &[u8]| {
    let [n, corrupt, mode, sent @ ..] = data else {
        return;
    };
    let n = 2 + usize::from(*n % 3);
    let corrupt = usize::from(*corrupt) % n;
    let shim_leaves = mode & 1 == 1;
    let sent = sent.to_vec();
    acode_run_fuzz::within(Duration::from_secs(10), "reading the reports", move || {
        let home: Arc<Mutex<Vec<OwnedFd>>> = Arc::default();
        // The shims' ends, by the runner's end's descriptor number (how a pooled slot is found).
        let mut shims: Vec<(RawFd, Option<OwnedFd>)> = Vec::new();
        let mut remotes = Vec::new();
        let mut expected = Vec::new();
        for i in 0..n {
            let (mine, theirs) = wire::socketpair(libc::SOCK_STREAM).expect("socketpair");
            let raw = mine.as_raw_fd();
            remotes.push(Remote::on_slot(mine, home.clone()));
            if i == corrupt {
                write(&theirs, &sent);
                expected.push(if sent.len() >= 5 {
                    Some(meaning(&sent[..5]))
                } else if shim_leaves {
                    Some(Ended::Lost)
                } else {
                    None
                });
                shims.push((raw, (!shim_leaves).then_some(theirs)));
            } else {
                let good = if i % 2 == 0 {
                    report(wire::EXITED, i as i32 * 256)
                } else {
                    report(wire::FAILED, i as i32)
                };
                // In two pieces: a report may arrive split.
                write(&theirs, &good[..2]);
                write(&theirs, &good[2..]);
                expected.push(Some(meaning(&good)));
                shims.push((raw, Some(theirs)));
            }
        }
        for (i, remote) in remotes.iter_mut().enumerate() {
            // Never blocks; five polls read any five bytes there are.
            let mut seen = None;
            for _ in 0..5 {
                seen = remote.ended();
                if seen.is_some() {
                    break;
                }
            }
            if expected[i].is_some() {
                assert_eq!(seen, expected[i], "slot {i} (corrupt: {corrupt}), polled");
                assert_eq!(
                    remote.wait(),
                    seen.unwrap_or(Ended::Lost),
                    "slot {i}, waited"
                );
            } else {
                assert_eq!(
                    seen, None,
                    "slot {i}: fewer than five bytes ended the command"
                );
            }
        }
        // The commands are done with: slots whose command ran and ended go back to the pool.
        drop(remotes);
        let pooled: Vec<OwnedFd> = std::mem::take(&mut *home.lock().unwrap());
        for (k, slot) in pooled.into_iter().enumerate() {
            let raw = slot.as_raw_fd();
            let Some((_, Some(shim))) = shims.iter().find(|(r, _)| *r == raw) else {
                // Its shim has gone: launch's send fails there and it takes another slot.
                continue;
            };
            let next = report(wire::EXITED, 7000 + k as i32);
            let mut remote = Remote::on_slot(slot, home.clone());
            write(shim, &next);
            assert_eq!(
                remote.wait(),
                meaning(&next),
                "the next command on a pooled slot read another command's report"
            );
        }
    });
});
