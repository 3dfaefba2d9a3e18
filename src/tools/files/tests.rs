//! Tests of the file tools against a real temporary workspace.

use super::*;
use crate::tools::Tool;
use crate::tools::search::{FileGlob, FileSearch};
use crate::tools::testutil::TestWs;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

fn artifact<'o>(out: &'o ToolOutput, kind: &str) -> &'o Artifact {
    out.artifacts
        .iter()
        .find(|a| a.artifact_type == kind)
        .unwrap_or_else(|| panic!("no {kind} artifact in {out:?}"))
}

fn failed_with(result: Result<ToolOutput, ToolError>, needle: &str) -> String {
    let msg = match result {
        Err(e @ (ToolError::Failed(_) | ToolError::Io { .. })) => e.to_string(),
        other => panic!("expected a failure mentioning {needle:?}, got {other:?}"),
    };
    assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
    msg
}

fn temp_files(dir: &Path) -> Vec<String> {
    TestWs::names(dir)
        .into_iter()
        .filter(|n| n.starts_with(".acode-tmp-"))
        .collect()
}

// --- file_read -------------------------------------------------------------------------

#[test]
fn read_whole_file() {
    let t = TestWs::new();
    t.write("src/lib.rs", "one\ntwo\nthree\n");
    let out = t.call(&FileRead, json!({"path": "src/lib.rs"})).unwrap();
    assert!(out.success);
    assert_eq!(out.content, "one\ntwo\nthree\n");
    let stdout = artifact(&out, "stdout");
    assert_eq!(stdout.content, "one\ntwo\nthree\n");
    assert_eq!(stdout.bytes, 14);
    assert!(!stdout.truncated);
    let info: Value = serde_json::from_str(&artifact(&out, "file_info").content).unwrap();
    assert_eq!(info["lines"], 3);
    assert_eq!(info["bytes"], 14);
    assert_eq!(info["lines_returned"], 3);
    assert_eq!(info["path"], "src/lib.rs");
}

#[test]
fn read_with_offset_and_limit() {
    let t = TestWs::new();
    t.write("f.txt", "l1\nl2\nl3\nl4\nl5");
    let out = t
        .call(&FileRead, json!({"path": "f.txt", "offset": 2, "limit": 2}))
        .unwrap();
    assert_eq!(out.content, "l2\nl3\n");
    let stdout = artifact(&out, "stdout");
    assert_eq!(stdout.bytes, 14);
    assert!(stdout.truncated, "a part of the file is marked as such");
    let out = t
        .call(&FileRead, json!({"path": "f.txt", "offset": 4}))
        .unwrap();
    assert_eq!(out.content, "l4\nl5");
    let info: Value = serde_json::from_str(&artifact(&out, "file_info").content).unwrap();
    assert_eq!(info["lines"], 5);
    assert_eq!(info["lines_returned"], 2);
    // Past the end: empty text and a note, not an error.
    let out = t
        .call(&FileRead, json!({"path": "f.txt", "offset": 9}))
        .unwrap();
    assert_eq!(artifact(&out, "stdout").content, "");
    assert!(out.content.contains("past the end"), "{}", out.content);
    // An empty file is just empty.
    t.write("empty", "");
    let out = t.call(&FileRead, json!({"path": "empty"})).unwrap();
    assert_eq!(out.content, "");
    // Schema refuses offset 0 and negative limits.
    for bad in [
        json!({"path": "f.txt", "offset": 0}),
        json!({"path": "f.txt", "limit": -1}),
    ] {
        assert!(matches!(
            t.call(&FileRead, bad),
            Err(ToolError::InvalidArguments { .. })
        ));
    }
}

#[test]
fn read_is_capped_on_a_char_boundary() {
    let mut t = TestWs::new();
    t.policy.limits.read_bytes = 10;
    // "ab\n" is 3 bytes and each 'é' 2, so the 10-byte cap falls inside the fourth 'é'.
    t.write("u.txt", "ab\néééé\nzz\n");
    let out = t.call(&FileRead, json!({"path": "u.txt"})).unwrap();
    let stdout = artifact(&out, "stdout");
    assert_eq!(stdout.content, "ab\nééé");
    assert!(stdout.truncated);
    assert_eq!(stdout.bytes, 15);
    assert!(
        out.content
            .starts_with("ab\nééé\n[acode-run: output truncated"),
        "{}",
        out.content
    );
    assert!(out.content.contains("offset=2"), "{}", out.content);
    assert!(
        !out.content.contains("U+FFFD"),
        "a cut char is not an invalid byte"
    );
}

#[test]
fn read_non_utf8_is_lossy_and_says_so() {
    let t = TestWs::new();
    t.write("latin1.txt", b"caf\xe9\n");
    let out = t.call(&FileRead, json!({"path": "latin1.txt"})).unwrap();
    assert!(out.success);
    assert_eq!(artifact(&out, "stdout").content, "caf\u{FFFD}\n");
    assert!(out.content.contains("not valid UTF-8"), "{}", out.content);
    let info: Value = serde_json::from_str(&artifact(&out, "file_info").content).unwrap();
    assert_eq!(info["lossy"], true);
}

#[test]
fn read_failures_name_the_path() {
    let t = TestWs::new();
    std::fs::create_dir_all(t.path("dir")).unwrap();
    let msg = failed_with(
        t.call(&FileRead, json!({"path": "missing.txt"})),
        "missing.txt",
    );
    assert!(!msg.contains(&t.root.display().to_string()), "{msg}");
    failed_with(
        t.call(&FileRead, json!({"path": "dir"})),
        "dir: is a directory",
    );
    // A FIFO would block forever if opened.
    let fifo = std::ffi::CString::new(t.path("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    failed_with(
        t.call(&FileRead, json!({"path": "fifo"})),
        "not a regular file",
    );
    assert!(matches!(
        t.call(&FileRead, json!({"path": "a.txt", "colour": 1})),
        Err(ToolError::InvalidArguments { .. })
    ));
}

#[test]
fn read_stops_when_cancelled() {
    let t = TestWs::new();
    t.write("big.txt", "x\n".repeat(4 * 1024 * 1024));
    t.cancel.store(true, Ordering::Relaxed);
    assert!(matches!(
        t.call(&FileRead, json!({"path": "big.txt"})),
        Err(ToolError::Interrupted)
    ));
}

// --- file_write ------------------------------------------------------------------------

#[test]
fn write_creates_parents_and_leaves_no_temp_file() {
    let t = TestWs::new();
    let out = t
        .call(
            &FileWrite,
            json!({"path": "a/b/c.txt", "contents": "hello\n"}),
        )
        .unwrap();
    assert!(out.success);
    assert_eq!(t.read("a/b/c.txt"), "hello\n");
    let diff = &artifact(&out, "diff").content;
    assert!(diff.contains("--- /dev/null"), "{diff}");
    assert!(diff.contains("+++ b/a/b/c.txt"), "{diff}");
    assert!(diff.contains("+hello"), "{diff}");
    assert!(temp_files(&t.path("a/b")).is_empty());
    assert!(temp_files(&t.root).is_empty());
}

#[test]
fn write_overwrites_keeping_permissions() {
    let t = TestWs::new();
    t.write("run.sh", "old\n");
    std::fs::set_permissions(t.path("run.sh"), fs::Permissions::from_mode(0o751)).unwrap();
    let out = t
        .call(&FileWrite, json!({"path": "run.sh", "contents": "new\n"}))
        .unwrap();
    assert_eq!(t.read("run.sh"), "new\n");
    let mode = fs::metadata(t.path("run.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o751);
    let diff = &artifact(&out, "diff").content;
    assert!(diff.contains("-old") && diff.contains("+new"), "{diff}");
    assert!(temp_files(&t.root).is_empty());
    // The preview shows the same diff without writing anything.
    let preview = FileWrite
        .preview(&json!({"path": "run.sh", "contents": "newer\n"}), &t.ctx())
        .unwrap();
    assert!(preview.contains("+newer"), "{preview}");
    assert_eq!(t.read("run.sh"), "new\n");
}

#[test]
fn write_through_an_inside_symlink_keeps_the_link() {
    let t = TestWs::new();
    t.write("real.txt", "old");
    symlink("real.txt", t.path("link.txt")).unwrap();
    t.call(&FileWrite, json!({"path": "link.txt", "contents": "new"}))
        .unwrap();
    assert_eq!(t.read("real.txt"), "new");
    assert!(
        fs::symlink_metadata(t.path("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn write_failures() {
    let t = TestWs::new();
    std::fs::create_dir_all(t.path("dir")).unwrap();
    t.write("file", "x");
    failed_with(
        t.call(&FileWrite, json!({"path": "dir", "contents": "x"})),
        "is a directory",
    );
    failed_with(
        t.call(&FileWrite, json!({"path": "file/sub.txt", "contents": "x"})),
        "file/sub.txt: Not a directory",
    );
    assert!(matches!(
        t.call(&FileWrite, json!({"path": "x.txt"})),
        Err(ToolError::InvalidArguments { .. })
    ));
    assert!(matches!(
        t.call(&FileWrite, json!({"path": ".", "contents": "x"})),
        Err(ToolError::Sandbox(_))
    ));
    assert_eq!(t.read("file"), "x");
}

// --- file_create -----------------------------------------------------------------------

#[test]
fn create_new_file() {
    let t = TestWs::new();
    let out = t
        .call(&FileCreate, json!({"path": "new/n.txt", "contents": "n\n"}))
        .unwrap();
    assert!(out.success);
    assert_eq!(t.read("new/n.txt"), "n\n");
    assert!(artifact(&out, "diff").content.contains("+n"));
    assert!(temp_files(&t.path("new")).is_empty());
    assert!(!FileCreate.idempotent());
}

#[test]
fn create_on_existing_file_fails_and_leaves_it_unchanged() {
    let t = TestWs::new();
    t.write("keep.txt", "original\n");
    failed_with(
        t.call(
            &FileCreate,
            json!({"path": "keep.txt", "contents": "clobber"}),
        ),
        "already exists",
    );
    assert_eq!(t.read("keep.txt"), "original\n");
    // The atomic path itself (past the early check) refuses too and cleans up.
    let ctx = t.ctx();
    let target = target("keep.txt", &ctx, false, false).unwrap();
    let err = write_atomic(&ctx, &target, b"clobber", false, None).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(t.read("keep.txt"), "original\n");
    assert!(temp_files(&t.root).is_empty());
    // An existing symlink or directory counts as existing too.
    symlink("keep.txt", t.path("link")).unwrap();
    failed_with(
        t.call(&FileCreate, json!({"path": "link", "contents": "x"})),
        "already exists",
    );
    std::fs::create_dir(t.path("d")).unwrap();
    failed_with(
        t.call(&FileCreate, json!({"path": "d", "contents": "x"})),
        "already exists",
    );
    assert_eq!(t.read("keep.txt"), "original\n");
}

// --- file_edit -------------------------------------------------------------------------

#[test]
fn edit_exactly_one_match() {
    let t = TestWs::new();
    t.write("e.rs", "fn a() {}\nfn b() {}\n");
    let out = t
        .call(
            &FileEdit,
            json!({"path": "e.rs", "old": "fn b() {}", "new": "fn b() -> u8 { 1 }"}),
        )
        .unwrap();
    assert!(out.success);
    assert_eq!(t.read("e.rs"), "fn a() {}\nfn b() -> u8 { 1 }\n");
    let diff = &artifact(&out, "diff").content;
    assert!(
        diff.contains("-fn b() {}") && diff.contains("+fn b() -> u8 { 1 }"),
        "{diff}"
    );
    assert!(temp_files(&t.root).is_empty());
}

#[test]
fn edit_zero_matches_fails() {
    let t = TestWs::new();
    t.write("e.txt", "alpha\n");
    failed_with(
        t.call(
            &FileEdit,
            json!({"path": "e.txt", "old": "beta", "new": "x"}),
        ),
        "not found",
    );
    assert_eq!(t.read("e.txt"), "alpha\n");
}

#[test]
fn edit_two_matches_needs_replace_all() {
    let t = TestWs::new();
    t.write("e.txt", "x = 1;\nx = 1;\n");
    let msg = failed_with(
        t.call(
            &FileEdit,
            json!({"path": "e.txt", "old": "x = 1", "new": "x = 2"}),
        ),
        "2 times",
    );
    assert!(msg.contains("replace_all"), "{msg}");
    assert_eq!(t.read("e.txt"), "x = 1;\nx = 1;\n");
    let preview = FileEdit
        .preview(
            &json!({"path": "e.txt", "old": "x = 1", "new": "x = 2", "replace_all": true}),
            &t.ctx(),
        )
        .unwrap();
    assert!(preview.contains("+x = 2"), "{preview}");
    assert_eq!(
        t.read("e.txt"),
        "x = 1;\nx = 1;\n",
        "preview has no side effects"
    );
    let out = t
        .call(
            &FileEdit,
            json!({"path": "e.txt", "old": "x = 1", "new": "x = 2", "replace_all": true}),
        )
        .unwrap();
    assert_eq!(out.content, "replaced 2 occurrences in e.txt");
    assert_eq!(t.read("e.txt"), "x = 2;\nx = 2;\n");
}

#[test]
fn edit_failures() {
    let t = TestWs::new();
    t.write("bin", b"\xff\xfe old");
    failed_with(
        t.call(
            &FileEdit,
            json!({"path": "bin", "old": "old", "new": "new"}),
        ),
        "not valid UTF-8",
    );
    failed_with(
        t.call(
            &FileEdit,
            json!({"path": "nope.txt", "old": "a", "new": "b"}),
        ),
        "nope.txt",
    );
    t.write("e.txt", "abc");
    assert!(matches!(
        t.call(&FileEdit, json!({"path": "e.txt", "old": "", "new": "b"})),
        Err(ToolError::InvalidArguments { .. })
    ));
    // Even without the schema, an empty `old` is refused by the tool itself.
    let args = json!({"path": "e.txt", "old": "", "new": "b"});
    assert!(FileEdit.check(&args, &t.ctx()).is_err());
    assert!(FileEdit.run(&args, &t.ctx()).is_err());
    assert_eq!(t.read("e.txt"), "abc");
}

// --- file_delete -----------------------------------------------------------------------

#[test]
fn delete_file_and_symlink() {
    let t = TestWs::new();
    t.write("gone.txt", "bye\n");
    let preview = FileDelete
        .preview(&json!({"path": "gone.txt"}), &t.ctx())
        .unwrap();
    assert!(preview.contains("-bye"), "{preview}");
    let out = t.call(&FileDelete, json!({"path": "gone.txt"})).unwrap();
    assert!(out.success);
    assert!(!t.path("gone.txt").exists());
    assert!(artifact(&out, "diff").content.contains("-bye"));
    // A symlink is removed itself; its target stays.
    t.write("target.txt", "stay");
    symlink("target.txt", t.path("link")).unwrap();
    t.call(&FileDelete, json!({"path": "link"})).unwrap();
    assert!(fs::symlink_metadata(t.path("link")).is_err());
    assert_eq!(t.read("target.txt"), "stay");
}

#[test]
fn delete_failures() {
    let t = TestWs::new();
    t.write("d/inner.txt", "x");
    failed_with(t.call(&FileDelete, json!({"path": "d"})), "is a directory");
    assert_eq!(t.read("d/inner.txt"), "x");
    failed_with(t.call(&FileDelete, json!({"path": "missing"})), "missing");
}

#[test]
fn registered_tools_have_precise_schemas() {
    let mut r = ToolRegistry::empty();
    register(&mut r);
    crate::tools::search::register(&mut r);
    let names: Vec<_> = r.names().collect();
    assert_eq!(
        names,
        [
            "file_create",
            "file_delete",
            "file_edit",
            "file_glob",
            "file_read",
            "file_search",
            "file_write",
            "list_directory"
        ]
    );
    for tool in r.iter() {
        let s = tool.schema();
        assert_eq!(s["type"], "object", "{}", tool.name());
        assert_eq!(s["additionalProperties"], false, "{}", tool.name());
        let props = s["properties"].as_object().unwrap();
        for (name, p) in props {
            assert!(p["description"].is_string(), "{}.{name}", tool.name());
        }
        for req in s["required"].as_array().unwrap() {
            assert!(props.contains_key(req.as_str().unwrap()), "{}", tool.name());
        }
        assert!(tool.description().ends_with('.'), "{}", tool.name());
    }
}

// --- path escapes ----------------------------------------------------------------------

/// Links and protected files the escape table relies on; returns the escape attempts.
fn escape_fixture(t: &mut TestWs) -> Vec<(String, bool)> {
    let out = t.outside.display().to_string();
    let root = t.root.display().to_string();
    t.write("sub/file.txt", "inside\n");
    t.write(".git/config", "[core]\n");
    t.write(".acode/executions.db", "db");
    t.ws.protect(Path::new(".acode/executions.db"));
    symlink(&t.outside, t.path("link_dir")).unwrap();
    symlink("../outside", t.path("link_rel_out")).unwrap();
    symlink(t.outside.join("sentinel.txt"), t.path("link_file")).unwrap();
    symlink("chain2", t.path("chain1")).unwrap();
    symlink(t.outside.join("sentinel.txt"), t.path("chain2")).unwrap();
    symlink("link_dir", t.path("chain_dir")).unwrap();
    symlink(t.outside.join("nonexistent"), t.path("dangling")).unwrap();
    symlink("../..", t.path("sub/link_up")).unwrap();
    symlink("sub", t.path("sub_link")).unwrap();
    symlink(&t.outside, t.path("sub/out_link")).unwrap();
    symlink(".git", t.path("git_link")).unwrap();
    symlink(".acode/executions.db", t.path("db_link")).unwrap();
    // (attempt, refused only for writes)
    let mut v: Vec<(String, bool)> = [
        "/etc/passwd".to_string(),
        "/".to_string(),
        "//etc/passwd".to_string(),
        format!("{out}/sentinel.txt"),
        out.clone(),
        format!("{out}/new.txt"),
        "../outside/sentinel.txt".to_string(),
        "../outside".to_string(),
        "../outside/new.txt".to_string(),
        "..".to_string(),
        "../".to_string(),
        "a/../../outside/sentinel.txt".to_string(),
        "./a/../../".to_string(),
        "./a/../../outside/new.txt".to_string(),
        "sub/../../outside".to_string(),
        "sub/./../../outside/sentinel.txt".to_string(),
        "../../../../../../../../../../etc/passwd".to_string(),
        "sub/../../../../../../tmp".to_string(),
        format!("{root}/../outside/sentinel.txt"),
        format!("{root}/sub/../../outside/new.txt"),
        format!("{root}/.."),
        format!("{root}evil/x"),
        "link_dir".to_string(),
        "link_dir/sentinel.txt".to_string(),
        "link_dir/new.txt".to_string(),
        "link_rel_out/sentinel.txt".to_string(),
        "link_file".to_string(),
        "chain1".to_string(),
        "chain_dir/sentinel.txt".to_string(),
        "chain_dir".to_string(),
        "dangling".to_string(),
        "dangling/x".to_string(),
        "sub/link_up/outside/sentinel.txt".to_string(),
        "sub/link_up".to_string(),
        "sub_link/out_link/sentinel.txt".to_string(),
        "sub/out_link/new.txt".to_string(),
        "sub/file.txt\0".to_string(),
        "\0".to_string(),
        "..\\outside\\sentinel.txt".to_string(),
        "sub\\file.txt".to_string(),
        "".to_string(),
    ]
    .into_iter()
    .map(|p| (p, false))
    .collect();
    for w in [
        ".git/config".to_string(),
        ".git/hooks/pre-commit".to_string(),
        ".git".to_string(),
        format!("{root}/.git/config"),
        "sub/../.git/config".to_string(),
        "git_link/config".to_string(),
        ".acode/executions.db".to_string(),
        ".acode/executions.db-wal".to_string(),
        ".acode/executions.db-journal".to_string(),
        "db_link".to_string(),
        ".".to_string(),
        root.clone(),
    ] {
        v.push((w, true));
    }
    v
}

#[test]
fn every_path_tool_refuses_every_escape() {
    let mut t = TestWs::new();
    let attempts = escape_fixture(&mut t);
    assert!(attempts.len() >= 30);
    let before_outside = TestWs::snapshot(&t.outside);
    let before_base = TestWs::names(&t.base);
    let before_git = TestWs::snapshot(&t.path(".git"));
    let before_acode = TestWs::snapshot(&t.path(".acode"));
    let before_ws = TestWs::names(&t.root);
    let ctx = t.ctx();

    let mut refused = 0;
    for (path, write_only) in &attempts {
        let p = path.as_str();
        let mut calls: Vec<(&dyn Tool, Value)> = vec![
            (&FileWrite, json!({"path": p, "contents": "pwned"})),
            (&FileCreate, json!({"path": p, "contents": "pwned"})),
            (
                &FileEdit,
                json!({"path": p, "old": "sentinel", "new": "pwned"}),
            ),
            (&FileDelete, json!({"path": p})),
        ];
        if !write_only {
            calls.extend([
                (&FileRead as &dyn Tool, json!({"path": p})),
                (&ListDirectory, json!({"path": p})),
                (&FileSearch, json!({"pattern": "sentinel", "root": p})),
                (&FileGlob, json!({"pattern": "**", "root": p})),
            ]);
        }
        for (tool, args) in calls {
            let what = format!("{} {args}", tool.name());
            match tool.check(&args, &ctx) {
                Err(ToolError::Sandbox(_)) => {}
                other => panic!("check: {what} should be a sandbox violation, got {other:?}"),
            }
            match tool.run(&args, &ctx) {
                Err(ToolError::Sandbox(_)) => {}
                other => panic!("run: {what} should be a sandbox violation, got {other:?}"),
            }
            assert!(tool.preview(&args, &ctx).is_none(), "preview: {what}");
            refused += 1;
        }
    }
    // Escaping glob patterns, for both tools that take one.
    for pattern in [
        "../*",
        "../outside/*",
        "/etc/*",
        "**/../../*",
        "sub/../../x",
        "..",
    ] {
        for (tool, args) in [
            (&FileGlob as &dyn Tool, json!({"pattern": pattern})),
            (&FileSearch, json!({"pattern": "x", "glob": pattern})),
        ] {
            assert!(
                matches!(tool.check(&args, &ctx), Err(ToolError::Sandbox(_))),
                "check {args}"
            );
            assert!(
                matches!(tool.run(&args, &ctx), Err(ToolError::Sandbox(_))),
                "run {args}"
            );
            refused += 1;
        }
    }
    assert!(refused > 300, "{refused}");

    assert_eq!(TestWs::snapshot(&t.outside), before_outside);
    assert_eq!(TestWs::names(&t.base), before_base);
    assert_eq!(TestWs::snapshot(&t.path(".git")), before_git);
    assert_eq!(TestWs::snapshot(&t.path(".acode")), before_acode);
    assert_eq!(TestWs::names(&t.root), before_ws);
    assert_eq!(
        fs::read_to_string(t.outside.join("sentinel.txt")).unwrap(),
        "sentinel\n"
    );
}

#[test]
fn walkers_do_not_follow_links_out() {
    let mut t = TestWs::new();
    escape_fixture(&mut t);
    let ctx = t.ctx();
    let search = FileSearch
        .run(&json!({"pattern": "sentinel"}), &ctx)
        .unwrap();
    assert_eq!(search.content, "[]", "no match may come from outside");
    let glob = FileGlob.run(&json!({"pattern": "**"}), &ctx).unwrap();
    assert!(!glob.content.contains("sentinel"), "{}", glob.content);
    let list = ListDirectory
        .run(&json!({"path": ".", "depth": 10}), &ctx)
        .unwrap();
    assert!(!list.content.contains("sentinel"), "{}", list.content);
    assert!(
        list.content
            .contains(r#"{"path":"link_dir","size":null,"type":"symlink"}"#),
        "{}",
        list.content
    );
}

// --- probes (preconditions) ------------------------------------------------------------------

#[test]
fn probes_use_the_kernel_checked_resolver() {
    let t = TestWs::new();
    t.write("sub/f.txt", "hello");
    symlink("sub/f.txt", t.path("inside-link")).unwrap();
    symlink("/proc/self/root/etc/passwd", t.path("magic")).unwrap();
    symlink(&t.outside, t.path("out")).unwrap();
    symlink("nowhere", t.path("dangling")).unwrap();
    let fifo = std::ffi::CString::new(t.path("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert_eq!(probe(&t.ws, "sub/f.txt").unwrap(), Probe::File);
    assert_eq!(probe(&t.ws, "inside-link").unwrap(), Probe::File);
    assert_eq!(probe(&t.ws, "sub").unwrap(), Probe::Dir);
    assert_eq!(probe(&t.ws, "fifo").unwrap(), Probe::Other);
    assert_eq!(probe(&t.ws, "missing").unwrap(), Probe::Missing);
    assert_eq!(read_regular(&t.ws, "inside-link", 3).unwrap(), b"hel");
    for bad in [
        "magic",
        "out/sentinel.txt",
        "../outside/sentinel.txt",
        "dangling",
    ] {
        assert!(
            matches!(probe(&t.ws, bad), Err(ToolError::Sandbox(_))),
            "{bad}"
        );
        assert!(
            matches!(read_regular(&t.ws, bad, 100), Err(ToolError::Sandbox(_))),
            "{bad}"
        );
    }
    // A FIFO is refused without blocking (no writer exists).
    let err = read_regular(&t.ws, "fifo", 100).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}
