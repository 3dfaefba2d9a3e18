//! The supervisor's wire protocol: `process::supervisor::wire::Request::read` (what the shim
//! reads a command with, from its slot socket) over a real `SOCK_STREAM` socket pair carrying a
//! few well-formed frames, then the fuzzer's bytes as a corrupt or truncated frame, then one more
//! well-formed frame; the writer closes its end as a runner that goes away does.
//!
//! Properties: reading ends within a deadline, whatever the bytes (a length that promises more
//! than comes is an error at end-of-stream, never a wait for ever, and never an allocation past
//! the 4 MiB limit); the frames before the corrupt one are read back exactly as sent (the error
//! is that command's, never an earlier one's); a frame that reads back re-encodes to a request
//! that reads back equal.
#![no_main]

use std::io::Write;
use std::time::Duration;

use acode_run::process::supervisor::wire;
use acode_run::process::supervisor::wire::Request;
use libfuzzer_sys::fuzz_target;

/// A well-formed request made of some of the fuzzer's bytes.
fn request(seed: &[u8], i: usize) -> Request {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let half = seed.len() / 2;
    Request {
        program: if i % 2 == 0 {
            String::new()
        } else {
            "/bin/true".into()
        },
        argv: vec![text(&seed[..half]), format!("arg{i}")],
        env: vec![
            ("PATH".into(), "/usr/bin".into()),
            (text(&seed[half..]), format!("{i}")),
        ],
        cwd: "/tmp".into(),
        rlimits: vec![(i as u8, seed.len() as u64, u64::MAX)],
        seccomp: match i % 3 {
            0 => Some(acode_run::process::seccomp::Kind::Network),
            1 => Some(acode_run::process::seccomp::Kind::Landlock),
            _ => None,
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, corrupt)) = data.split_first() else {
        return;
    };
    let before = usize::from(head % 4);
    let sent: Vec<Request> = (0..before)
        .map(|i| request(&corrupt[..corrupt.len().min(16)], i))
        .collect();
    let after = request(b"after", 9);
    let mut stream = Vec::new();
    for r in &sent {
        stream.extend_from_slice(&r.encode());
    }
    stream.extend_from_slice(corrupt);
    stream.extend_from_slice(&after.encode());
    let (reader, writer) = wire::socketpair(libc::SOCK_STREAM).unwrap();
    let writing = std::thread::spawn(move || {
        let mut w = std::fs::File::from(writer);
        let _ = w.write_all(&stream);
        // Dropping `w` closes the runner's end.
    });
    let read = acode_run_fuzz::within(Duration::from_secs(10), "reading the slot", move || {
        let mut r = std::fs::File::from(reader);
        let mut got = Vec::new();
        loop {
            match Request::read(&mut r) {
                Ok(req) => got.push(req),
                Err(e) => return (got, e),
            }
            if got.len() > before + 64 {
                panic!("more frames read than could have been sent");
            }
        }
    });
    let _ = writing.join();
    let (got, _end) = read;
    assert!(
        got.len() >= before,
        "a frame before the corrupt one was lost"
    );
    assert_eq!(
        &got[..before],
        &sent[..],
        "a frame before the corrupt one changed"
    );
    for r in &got {
        let again = Request::read(&mut r.encode().as_slice()).expect("a re-encoded request reads");
        assert_eq!(&again, r);
    }
});
