//! Crash recovery: `kill -9` at any moment, then resume (SPEC §9, §11).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

fn wait_for(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill9(child: &mut std::process::Child) {
    // SAFETY: SIGKILL to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

/// Starts the plan without the OS sandbox, waits until its slow step wrote a `started-<pid>` marker,
/// then kills acode-run with SIGKILL.
fn kill9_once_started(t: &TestDir, plan: &std::path::Path) {
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--sandbox", "none"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !walk(&t.ws).iter().any(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("started-")
    }) {
        assert!(Instant::now() < deadline, "the slow step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill9(&mut child);
}

fn integrity_ok(t: &TestDir) {
    assert_eq!(q::<String>(&t.db(), "PRAGMA integrity_check"), "ok");
}

fn no_half_written_files(t: &TestDir) {
    for entry in walk(&t.ws) {
        let name = entry.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.starts_with(".acode-tmp"),
            "half-written file left: {}",
            entry.display()
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn an_interrupted_command_step_is_rerun_only_when_asked() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import os, time\nopen('started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(2)\n",
    );
    let plan = t.plan("r.json", &json!({"plan_id": "resume", "steps": [
        {"step_id": "first", "tool": "file_write", "arguments": {"path": "first.txt", "contents": "1"}},
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}},
        {"step_id": "last", "tool": "file_write", "arguments": {"path": "last.txt", "contents": "3"}}]}));
    t.approve(&plan);
    kill9_once_started(&t, &plan);
    integrity_ok(&t);
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "running");
    assert_eq!(
        q::<String>(&t.db(), "SELECT status FROM steps WHERE step_id='slow'"),
        "running"
    );

    // The process is gone: the run reads as interrupted.
    let out = t.run(&["runs", "--json"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).unwrap()[0]["status"],
        "interrupted"
    );
    let out = t.run(&["show", &run_id[..8]]);
    assert!(
        stdout(&out).contains("status    interrupted"),
        "{}",
        stdout(&out)
    );

    // run_command is not idempotent: resuming refuses to run it twice unasked, with its own exit
    // code, and changes nothing.
    let before: String = q(
        &t.db(),
        "SELECT group_concat(step_id || status, ',') FROM steps",
    );
    let out = t.run(&["resume", &run_id, "--sandbox", "none"]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    let told = format!("acode-run resume {run_id} --rerun-interrupted");
    assert!(stderr(&out).contains(&told), "{}", stderr(&out));
    assert!(!t.ws.join("last.txt").exists());
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "running");
    assert_eq!(
        q::<String>(
            &t.db(),
            "SELECT group_concat(step_id || status, ',') FROM steps"
        ),
        before
    );

    // The suggested command works.
    let out = t.run(&[
        "resume",
        &run_id,
        "--rerun-interrupted",
        "--sandbox",
        "none",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "completed");
    assert_eq!(t.read("last.txt"), "3");
    integrity_ok(&t);
    // The step counter goes on where the run was: the resumed steps are 2 and 3 of 3.
    assert!(stderr(&out).contains("[2/3] slow"), "{}", stderr(&out));
    assert!(stderr(&out).contains("[3/3] last"), "{}", stderr(&out));
    // Both attempts of the step run twice are seen (docs/recovery.md): the cut-off one is an
    // `interrupted` execution saying so, and `show` counts 2 attempts.
    assert_eq!(
        q::<i64>(
            &t.db(),
            "SELECT count(*) FROM executions WHERE step_id = 'slow'"
        ),
        2
    );
    let cut: String = q(
        &t.db(),
        "SELECT error_message FROM executions WHERE step_id = 'slow' AND success = 0",
    );
    assert!(cut.starts_with("cut off: the runner stopped"), "{cut}");
    let out = t.run(&["show", &run_id]);
    let line = stdout(&out)
        .lines()
        .find(|l| l.contains(" slow "))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains("attempts 2"), "{}", stdout(&out));
}

/// SIGTERM during a step (issue #34 item 12): the steps after it are `skipped` (the run stopped),
/// not `blocked` by a failure, on the console and in the database, as docs/recovery.md says.
#[test]
fn sigterm_marks_the_steps_not_yet_run_skipped_not_blocked() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import os, time\nopen('started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(30)\n",
    );
    let plan = t.plan("r.json", &json!({"plan_id": "term", "steps": [
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}},
        {"step_id": "after", "tool": "file_write", "arguments": {"path": "after.txt", "contents": "x"}},
        {"step_id": "last", "tool": "file_write", "arguments": {"path": "last.txt", "contents": "x"}}]}));
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--sandbox", "none"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = collect_stderr(&mut child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !walk(&t.ws).iter().any(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("started-")
    }) {
        assert!(Instant::now() < deadline, "the slow step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !err.lock().unwrap().contains("interrupted:") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = err.lock().unwrap().clone();
    assert!(
        text.contains("[-] after … skipped (the run stopped before it)"),
        "{text}"
    );
    assert!(
        text.contains("[-] last … skipped (the run stopped before it)"),
        "{text}"
    );
    assert!(!text.contains("blocked"), "{text}");
    assert_eq!(
        q::<String>(
            &t.db(),
            "SELECT group_concat(step_id || '=' || status, ',') FROM steps ORDER BY position"
        ),
        "slow=failed,after=skipped,last=skipped"
    );
}

/// A random number in `0..n`, from a fresh UUID (no extra crate for a test's jitter).
fn random_below(n: u64) -> u64 {
    let b = uuid::Uuid::new_v4().into_bytes();
    u64::from_le_bytes(b[..8].try_into().unwrap()) % n
}

#[test]
fn a_mixed_plan_killed_at_random_points_and_resumed_as_told_completes() {
    let started = Instant::now();
    let steps: Vec<_> = (0..50)
        .map(|i| match i % 5 {
            0 => json!({"step_id": format!("s{i}"), "tool": "file_write",
                        "arguments": {"path": format!("out/f{i}.txt"), "contents": format!("{i}\n")}}),
            1 => json!({"step_id": format!("s{i}"), "tool": "run_command",
                        "arguments": {"command": format!("python3 step.py {i}")}}),
            2 => json!({"step_id": format!("s{i}"), "tool": "file_read",
                        "arguments": {"path": format!("out/f{}.txt", i - 2)}}),
            3 => json!({"step_id": format!("s{i}"), "tool": "file_write",
                        "arguments": {"path": format!("out/g{i}.txt"), "contents": "g"}}),
            _ => json!({"step_id": format!("s{i}"), "tool": "list_directory",
                        "arguments": {"path": "out"}}),
        })
        .collect();
    for round in 0..2 {
        let t = TestDir::new();
        t.file(
            "step.py",
            "import sys\nopen('log.txt', 'a').write(sys.argv[1] + '\\n')\n",
        );
        let plan = t.plan("m.json", &json!({"plan_id": "mixed", "steps": steps}));
        t.approve(&plan);
        let plan_arg = plan.to_str().unwrap().to_string();
        let run_id = || -> Option<String> {
            if !t.ws.join(".acode/executions.db").exists() {
                return None;
            }
            t.db()
                .query_row("SELECT run_id FROM runs", [], |r| r.get(0))
                .ok()
        };
        let mut rerun = false;
        let mut kills = 0;
        let mut done = false;
        let completed = || -> bool {
            run_id().is_some()
                && t.db()
                    .query_row("SELECT status FROM runs", [], |r| r.get::<_, String>(0))
                    .is_ok_and(|s| s == "completed")
        };
        for _ in 0..4 {
            // Killed after the run was recorded completed (while it was still exiting): done.
            if completed() {
                done = true;
                break;
            }
            let mut args: Vec<String> = match run_id() {
                None => vec!["run".into(), plan_arg.clone()],
                Some(id) => vec!["resume".into(), id],
            };
            if rerun {
                args.push("--rerun-interrupted".into());
            }
            args.extend(["--sandbox".into(), "none".into()]);
            let mut child = t.cmd().args(&args).stderr(Stdio::piped()).spawn().unwrap();
            let err = collect_stderr(&mut child);
            // Killed at a random point of observed progress (1 to 4 more of the 20 files the
            // plan writes; never after the last), so each attempt is cut off mid-run unless it
            // ends first; bounded polling, no sleep taken as a measure of progress.
            let files = || {
                std::fs::read_dir(t.ws.join("out"))
                    .map(|d| d.count())
                    .unwrap_or(0)
            };
            let target = (files() + 1 + random_below(4) as usize).min(19);
            let deadline = Instant::now() + Duration::from_secs(60);
            let exited = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break Some(status);
                }
                if files() >= target {
                    break None;
                }
                assert!(
                    Instant::now() < deadline,
                    "round {round}: no progress in 60 s"
                );
                std::thread::sleep(Duration::from_millis(1));
            };
            match exited {
                Some(status) => match status.code() {
                    Some(0) => {
                        done = true;
                        break;
                    }
                    // Told to rerun the interrupted step explicitly: do as told next time.
                    Some(4) => rerun = true,
                    other => {
                        std::thread::sleep(Duration::from_millis(100));
                        panic!(
                            "round {round}: {args:?} exited {other:?}: {}",
                            err.lock().unwrap()
                        )
                    }
                },
                None => {
                    kill9(&mut child);
                    kills += 1;
                    rerun = false;
                }
            }
        }
        if !done && run_id().is_none() {
            // Every attempt was killed before the run was recorded: nothing to resume.
            let out = t.run(&["run", &plan_arg, "--sandbox", "none"]);
            assert_eq!(code(&out), 0, "round {round}: {}", stderr(&out));
        } else if !done && !completed() {
            let id = run_id().unwrap_or_default();
            let mut out = t.run(&["resume", &id, "--sandbox", "none"]);
            if code(&out) == 4 {
                let told = format!("acode-run resume {id} --rerun-interrupted");
                assert!(stderr(&out).contains(&told), "{}", stderr(&out));
                out = t.run(&["resume", &id, "--rerun-interrupted", "--sandbox", "none"]);
            }
            assert_eq!(code(&out), 0, "round {round}: {}", stderr(&out));
        }
        eprintln!("round {round}: {kills} kills, done early: {done}, told to rerun: {rerun}");
        assert!(kills >= 1, "round {round}: nothing was interrupted");
        let db = t.db();
        assert_eq!(q::<i64>(&db, "SELECT count(*) FROM runs"), 1);
        assert_eq!(q::<String>(&db, "SELECT status FROM runs"), "completed");
        assert_eq!(q::<i64>(&db, "SELECT count(*) FROM steps"), 50);
        assert_eq!(
            q::<i64>(&db, "SELECT count(*) FROM steps WHERE status = 'completed'"),
            50,
            "round {round}"
        );
        // Each kill cuts off at most one step, which alone may have run twice.
        let twice: i64 = q(
            &db,
            "SELECT count(*) FROM (SELECT step_id FROM executions WHERE success = 1
             GROUP BY step_id HAVING count(*) > 1)",
        );
        assert!(
            twice <= kills,
            "round {round}: {twice} steps ran twice after {kills} kills"
        );
        for i in (0..50).step_by(5) {
            assert_eq!(t.read(&format!("out/f{i}.txt")), format!("{i}\n"));
        }
        integrity_ok(&t);
        no_half_written_files(&t);
    }
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn resume_with_rerun_interrupted_completes_each_step_once() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import os, time\nopen('started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(1)\n",
    );
    let plan = t.plan("r.json", &json!({"plan_id": "resume", "steps": [
        {"step_id": "first", "tool": "file_write", "arguments": {"path": "first.txt", "contents": "1"}},
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}},
        {"step_id": "last", "tool": "file_write", "arguments": {"path": "last.txt", "contents": "3"}}]}));
    t.approve(&plan);
    kill9_once_started(&t, &plan);
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--resume",
        "--rerun-interrupted",
        "--sandbox",
        "none",
        "--jsonl",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let events = events(&out);
    assert_eq!(events[0]["already_completed"], 1);
    let db = t.db();
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM runs"),
        1,
        "resumed, not restarted"
    );
    assert_eq!(q::<String>(&db, "SELECT status FROM runs"), "completed");
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM steps WHERE status='completed'"),
        3
    );
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE step_id='first'"),
        1,
        "not re-run"
    );
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE step_id='last'"),
        1
    );
    assert_eq!(t.read("last.txt"), "3");
    integrity_ok(&t);
    // Nothing left to resume.
    let out = t.run(&["run", plan.to_str().unwrap(), "--resume"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no interrupted run"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn kill_9_at_any_moment_then_resume_completes() {
    let steps: Vec<_> = (0..150)
        .map(|i| json!({"step_id": format!("w{i}"), "tool": "file_write",
                         "arguments": {"path": format!("out/f{i}.txt"), "contents": format!("content {i}\n")}}))
        .collect();
    // Each round is killed once the step writing `out/f{N}.txt` has landed (bounded polling),
    // so at least 40 steps remain: every round interrupts a run in progress.
    for (round, landed) in [0usize, 30, 70, 110].into_iter().enumerate() {
        let t = TestDir::new();
        let plan = t.plan("k.json", &json!({"plan_id": "kill9", "steps": steps}));
        t.approve(&plan);
        let mut child = t
            .cmd()
            .arg(plan.to_str().unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mark = t.ws.join(format!("out/f{landed}.txt"));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !mark.exists() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "round {round}: the run ended before f{landed}.txt"
            );
            assert!(
                Instant::now() < deadline,
                "round {round}: no progress in 60 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        kill9(&mut child);
        let finished: Option<String> = t
            .db()
            .query_row("SELECT status FROM runs", [], |r| r.get(0))
            .ok();
        assert!(
            finished.as_deref().is_some_and(|s| s != "completed"),
            "round {round}: the kill interrupted nothing (run status {finished:?})"
        );
        let out = t.run(&["run", plan.to_str().unwrap(), "--resume"]);
        assert_eq!(code(&out), 0, "round {round}: {}", stderr(&out));
        let db = t.db();
        if finished.is_some() {
            assert_eq!(
                q::<i64>(&db, "SELECT count(*) FROM steps WHERE status='completed'"),
                150,
                "round {round}"
            );
            // A step re-runs only if it was cut off mid-way: at most one step has two executions.
            assert!(
                q::<i64>(
                    &db,
                    "SELECT count(*) FROM (SELECT step_id FROM executions GROUP BY step_id HAVING count(*) > 1)"
                ) <= 1
            );
            for i in [0, 75, 149] {
                assert_eq!(t.read(&format!("out/f{i}.txt")), format!("content {i}\n"));
            }
        }
        integrity_ok(&t);
        no_half_written_files(&t);
        if finished.is_some() {
            let staged = walk(&t.ws.join(".acode/tmp"))
                .into_iter()
                .filter(|p| p.is_file())
                .count();
            assert_eq!(
                staged, 0,
                "round {round}: the crashed run's staging area was swept"
            );
        }
    }
}

#[test]
fn resume_refuses_a_changed_plan() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import time\nopen('started', 'w').write('1')\ntime.sleep(30)\n",
    );
    let plan = t.plan(
        "r.json",
        &json!({"plan_id": "resume", "steps": [
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}}]}),
    );
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--sandbox", "none"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&t.ws.join("started"));
    kill9(&mut child);
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    // Edit and re-approve the plan: the run belongs to the old bytes.
    let text = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("slow.py", "slow.py ");
    std::fs::write(&plan, text).unwrap();
    t.approve(&plan);
    let out = t.run(&["resume", &run_id]);
    assert_exit_with(&out, 2, "only the same plan can be resumed");
}

/// Issue #21: a resumed run keeps the options it was started with — a bare `resume` of an
/// interrupted `--confirm auto-approve` run still approves, and a differing option is refused.
#[test]
fn a_resumed_run_keeps_its_confirmation_mode_and_refuses_other_options() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import os, time\nopen('started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(30)\n",
    );
    t.file("doomed.txt", "x");
    let plan = t.plan(
        "r.json",
        &json!({"plan_id": "keep-options", "steps": [
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}},
        {"step_id": "delete", "tool": "file_delete", "arguments": {"path": "doomed.txt"}}]}),
    );
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([
            plan.to_str().unwrap(),
            "--sandbox",
            "none",
            "--confirm",
            "auto-approve",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !walk(&t.ws).iter().any(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("started-")
    }) {
        assert!(Instant::now() < deadline, "the slow step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill9(&mut child);
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let recorded: String = q(&t.db(), "SELECT settings_json FROM runs");
    assert!(
        recorded.contains("\"confirm\":\"auto-approve\""),
        "{recorded}"
    );
    assert!(recorded.contains("\"sandbox\":\"none\""), "{recorded}");

    // Another option than the run's: refused, naming it and both values, nothing changed.
    let out = t.run(&[
        "resume",
        &run_id,
        "--sandbox",
        "landlock",
        "--rerun-interrupted",
    ]);
    assert_exit_with(&out, 2, "--sandbox landlock: the run was started with none");
    let out = t.run(&[
        "resume",
        &run_id,
        "--confirm",
        "auto-deny",
        "--rerun-interrupted",
    ]);
    assert_exit_with(
        &out,
        2,
        "--confirm auto-deny: the run was started with auto-approve",
    );
    assert!(t.ws.join("doomed.txt").exists());

    // Bare (no --confirm, no terminal, which alone would deny): the recorded auto-approve holds.
    t.file("slow.py", "print('quick this time')\n");
    let out = t.run(&["resume", &run_id, "--rerun-interrupted"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!t.ws.join("doomed.txt").exists());
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "completed");
    integrity_ok(&t);
}

/// The runner's directories in `dir` (`acode-run-…`; not the marker of its last sweep).
fn scratch_dirs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("acode-run-"))
        })
        .collect();
    found.sort();
    found
}

/// As if made two hours ago.
fn age(dir: &std::path::Path) {
    let when = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::open(dir)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

/// A runner killed with SIGKILL removes nothing: its temporary directory stays in `TMPDIR`. The
/// next run removes it, since nobody holds it any more (its lock died with the process) — and
/// leaves the directory of a runner that is still running, however old.
#[test]
fn a_killed_runners_temporary_directory_is_removed_by_the_next_run_and_a_living_ones_is_not() {
    let t = TestDir::new();
    let tmp = t.root.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp_env = tmp.to_str().unwrap().to_string();
    t.file(
        "slow.py",
        "import os, time\nopen('out/started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(30)\n",
    );
    // Under Landlock a command creates entries in directories, not at the workspace root.
    std::fs::create_dir_all(t.ws.join("out")).unwrap();
    let slow = t.plan(
        "slow.json",
        &json!({"plan_id": "slow", "steps": [
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}}]}),
    );
    let quick = t.plan(
        "quick.json",
        &json!({"plan_id": "quick", "steps": [
        {"step_id": "q", "tool": "run_command", "arguments": {"command": "python3 -c pass"}}]}),
    );
    t.approve(&slow);
    t.approve(&quick);
    let started = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while walk(&t.ws)
            .iter()
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("started-")
            })
            .count()
            < n
        {
            assert!(
                Instant::now() < deadline,
                "the slow step never started: {}",
                std::fs::read_to_string(t.root.join("slow.err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let start_slow = || {
        t.cmd_with(&[("TMPDIR", &tmp_env)])
            .args([slow.to_str().unwrap(), "--sandbox", "landlock"])
            .stderr(std::fs::File::create(t.root.join("slow.err")).unwrap())
            .spawn()
            .unwrap()
    };

    let mut killed = start_slow();
    started(1);
    kill9(&mut killed);
    let left = scratch_dirs(&tmp);
    assert_eq!(left.len(), 1, "the killed run's directory: {left:?}");
    age(&left[0]);

    let mut living = start_slow();
    started(2);
    let living_dir: Vec<_> = scratch_dirs(&tmp)
        .into_iter()
        .filter(|d| *d != left[0])
        .collect();
    assert_eq!(living_dir.len(), 1, "{living_dir:?}");
    age(&living_dir[0]);

    // As if the last sweep (at the killed run's start) was long ago.
    for marker in std::fs::read_dir(&tmp).unwrap().flatten() {
        if marker
            .file_name()
            .to_string_lossy()
            .starts_with("acode-run-swept-")
        {
            age(&marker.path());
        }
    }
    let out = t
        .cmd_with(&[("TMPDIR", &tmp_env)])
        .args([quick.to_str().unwrap(), "--sandbox", "landlock"])
        .output()
        .unwrap();
    kill9(&mut living);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!left[0].exists(), "the killed run's directory stayed");
    assert!(
        living_dir[0].exists(),
        "a running runner's directory was removed"
    );
}
