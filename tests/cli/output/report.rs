//! The HTML report (issue 36, docs/report.md) of real runs, loaded in a real browser: headless
//! Chromium (Debian's `chromium`) with the network off reads the page, the test checks the DOM it
//! dumps and takes a screenshot. Hostile text from a command, a file name, a model and an MCP
//! server must neither run (a payload that would retitle the page) nor fetch anything (a listener
//! on 127.0.0.1 counts requests), and secrets never reach the file's bytes.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::json;

use crate::harness::*;

/// The headless browser, or `None` (with the reason printed) where it is not installed; under CI
/// a missing browser fails the test instead.
pub fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser"] {
        let found = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        });
        if found.is_some() {
            return found;
        }
    }
    acode_run::testing::skip(
        "chromium",
        "the report is checked in a browser (scripts/test.sh installs it as root)",
    );
    None
}

/// Runs headless Chromium on `page` with the network and every background service off, in a
/// fresh profile directory; `extra` picks the output (`--dump-dom`, `--screenshot=...`).
pub fn browse(browser: &Path, page: &Path, extra: &[&str]) -> Output {
    browse_at(browser, page, "", extra)
}

/// [`browse`] at `fragment` (`#expand-all` opens every step).
pub fn browse_at(browser: &Path, page: &Path, fragment: &str, extra: &[&str]) -> Output {
    let profile = std::env::temp_dir().join(format!("acode-chromium-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&profile).unwrap();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--hide-scrollbars",
            // Every name resolves nowhere: nothing the page names could be reached.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}{fragment}", page.display()))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A listener on 127.0.0.1 that counts every connection made to it: the page names it in
/// hostile `<img>`, `<link>` and `<meta refresh>` tags, which must stay text.
pub fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
        }
    });
    (port, hits)
}

/// Text that would change `document.title`, fetch from `port`, break out of the style sheet or
/// reorder what a reader sees, were it not escaped.
pub fn hostile(port: u16) -> String {
    format!(
        "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">\
         <a href=\"javascript:document.title='pwned'\">click</a></style><style>body{{display:none}}</style>\
         <img src=\"http://127.0.0.1:{port}/img.png\"><link rel=stylesheet href=\"http://127.0.0.1:{port}/s.css\">\
         <meta http-equiv=\"refresh\" content=\"0;url=http://127.0.0.1:{port}/go\">\u{202e}txt.exe"
    )
}

const VAR_SECRET: &str = "Var5ecret-rpt-9f3k2m";
/// A GitHub token, printed by a command from two halves (so the plan holds neither whole).
const OUTPUT_TOKEN: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
const MODEL_TOKEN: &str = "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD";

/// The client of tests/cli/sandbox/network.rs, trimmed: one CONNECT through the run's proxy.
const CLIENT: &str = r#"
import base64, os, socket, sys, urllib.parse
u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
s = socket.create_connection((u.hostname, u.port), timeout=10)
auth = base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
t = sys.argv[1]
s.sendall(f"CONNECT {t} HTTP/1.1\r\nHost: {t}\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
print(s.recv(4096).decode().split("\r\n")[0])
"#;

/// A run with an agent conversation, an MCP call, a refused host, hostile output and file name,
/// a retried failure beside a step it cancels (`--jobs 2`); returns the test dir, the report
/// `run --report-html` wrote, the one `report` wrote, and the listener's count.
fn hostile_run() -> (TestDir, PathBuf, PathBuf, Arc<AtomicUsize>, Output) {
    let t = TestDir::new();
    let (port, hits) = counting_listener();
    let evil = hostile(port);
    t.file("client.py", CLIENT);
    t.file("notes.txt", &format!("notes {evil}\n"));
    t.file(
        "acode-policy.json",
        &json!({
            "allow_commands": ["sh", "python3", "sleep"],
            "auto_approve_commands": ["sh", "python3", "sleep"],
            "network": {"allow": ["localhost:1"]},
            "mcp": {"servers": {"fx": {
                "command": ["acode-mcp-fixture", "handshake"], "tools": ["echo"], "confirm": false}}}
        })
        .to_string(),
    );
    let llm = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "notes.txt"}))]),
        ScriptedResponse::chat_text(&format!(
            "Done. {evil} The key is {MODEL_TOKEN} and the token {VAR_SECRET}."
        )),
    ]);
    let (half1, half2) = OUTPUT_TOKEN.split_at(20);
    let noisy = format!(
        "printf '%s\\n' \"$1\"; printf '%s%s\\n' {half1} {half2}; i=0; while [ $i -lt 300 ]; do echo line $i; i=$((i+1)); done"
    );
    let evil_name = "x<img src=x onerror=document.title='pwned'>\u{202e}gpj.txt";
    let plan = t.plan(
        "report.json",
        &json!({"plan_id": "report-demo", "variables": {"api_token": "unset"}, "steps": [
            {"step_id": "ask", "tool": "agent", "arguments": {
                "instruction": "Read notes.txt and summarise it.", "tools": ["file_read"], "max_turns": 4}},
            {"step_id": "mcp", "tool": "mcp__fx__echo", "arguments": {"text": evil}},
            {"step_id": "net", "tool": "run_command", "arguments": {
                "argv": ["python3", "client.py", "denied.example.org:443"]}},
            {"step_id": "noisy", "tool": "run_command", "arguments": {
                "argv": ["sh", "-c", noisy, "sh", format!("{evil} ${{api_token}}")]}},
            {"step_id": "evil-name", "tool": "file_write", "arguments": {
                "path": evil_name, "contents": "first\nsecond\n"}},
            {"step_id": "slow", "tool": "run_command", "parallel_safe": true,
             "depends_on": ["evil-name"], "arguments": {"argv": ["sleep", "5"]}},
            {"step_id": "boom", "tool": "run_command", "parallel_safe": true, "retries": 1,
             "depends_on": ["evil-name"], "arguments": {
                "argv": ["sh", "-c", "sleep 0.3; echo failing >&2; exit 4"], "retryable": true}}
        ]}),
    );
    let run = |args: &[&str]| mcp::run(&t, args, &[]);
    let approved = run(&["approve", plan.to_str().unwrap(), "--by", "reviewer"]);
    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    let first = t.root.join("run-report.html");
    let url = llm.url();
    let var = format!("api_token={VAR_SECRET}");
    let out = run(&[
        "run",
        plan.to_str().unwrap(),
        "--jobs",
        "2",
        "--llm-url",
        &url,
        "--model",
        "test-model",
        "--var",
        &var,
        "--report-html",
        first.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let second = t.root.join("report.html");
    let report = run(&["report", &run_id[..8], "--html", second.to_str().unwrap()]);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    (t, first, second, hits, out)
}

#[test]
fn the_report_of_a_hostile_parallel_run_shows_everything_and_runs_nothing() {
    let Some(browser) = chromium() else { return };
    let (t, first, second, hits, _) = hostile_run();
    let bytes = std::fs::read(&first).unwrap();
    assert_eq!(
        bytes,
        std::fs::read(&second).unwrap(),
        "`run --report-html` and `report --html` write the same page"
    );
    let page = String::from_utf8(bytes).unwrap();

    // Secrets: none of the three, in any form, in the file's bytes.
    for secret in [VAR_SECRET, OUTPUT_TOKEN, MODEL_TOKEN] {
        assert!(!page.contains(secret), "{secret} is in the report");
    }
    assert!(page.contains("[REDACTED]"));
    // Escaping: the only script is the page's own, no tag of the payload survives as a tag, and
    // nothing outside the file is named.
    assert_eq!(page.matches("<script").count(), 1, "one script element");
    for raw in [
        "<img",
        "<a href=\"javascript",
        "<link",
        "<meta http-equiv=\"refresh",
        "\u{202e}",
    ] {
        assert!(!page.contains(raw), "{raw:?} reached the page unescaped");
    }
    assert!(page.contains("&lt;script&gt;document.title="));
    assert!(
        page.contains("\\u{202e}"),
        "the RTL override is shown as an escape"
    );
    assert!(!page.contains("src=\"http"), "no external resource");

    let dom = browse(
        &browser,
        &first,
        &["--virtual-time-budget=3000", "--dump-dom"],
    );
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    assert!(
        dom.contains("<title>acode-run report: report-demo (failed)</title>"),
        "the title changed: {}",
        &dom[..dom.len().min(600)]
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the page fetched from 127.0.0.1"
    );

    // The header.
    for needle in [
        "id=\"plan-id\">report-demo<",
        "id=\"run-status\">failed<",
        "30 — a step failed",
        "approved by <b>reviewer</b>",
        "unsigned (the name is claimed: no approval key was in force)",
        "which held",
        "id=\"sandbox-notes\"><ul><li>",
        "up to 2",
        "id=\"mcp-pins\"><b>fx</b>",
    ] {
        assert!(dom.contains(needle), "header: {needle:?} missing");
    }
    // The timeline: two lanes (slow and boom ran together), bars by outcome, the retry's tick.
    assert!(dom.contains("data-lane=\"1\""), "a second lane");
    for class in ["b completed", "b failed", "b cancelled"] {
        assert!(dom.contains(&format!("class=\"{class}\"")), "bar {class}");
    }
    assert!(dom.contains("class=\"retry\""), "the retry is marked");
    assert!(dom.contains("↻2"));
    // Every step, with its status.
    for (step, status) in [
        ("ask", "completed"),
        ("mcp", "completed"),
        ("net", "completed"),
        ("noisy", "completed"),
        ("evil-name", "completed"),
        ("slow", "cancelled"),
        ("boom", "failed"),
    ] {
        assert!(
            dom.contains(&format!(
                "<span class=\"badge\">{status}</span><b class=\"step-id\">{step}</b>"
            )),
            "step {step} {status}"
        );
    }
    // A command: argv, program path and hash, exit status, stdout head and tail with the cut.
    assert!(dom.contains("class=\"argv\">sh -c 'sleep 0.3; echo failing &gt;&amp;2; exit 4'"));
    assert!(dom.contains("class=\"program-path\">/"));
    let sha = q::<String>(
        &t.db(),
        "SELECT program_sha256 FROM executions WHERE step_id = 'boom' LIMIT 1",
    );
    assert!(dom.contains(&format!("class=\"program-sha256\">{sha}<")));
    assert!(dom.contains("exit status 4"));
    assert!(dom.contains("line 0\n") && dom.contains("line 299\n"));
    assert!(
        !dom.contains("line 150\n"),
        "the middle of a long output is cut"
    );
    assert!(dom.contains("characters not shown"));
    assert!(dom.contains("attempt 2"), "the retry's execution");
    // The file step: the hostile name escaped, its diff coloured.
    assert!(dom.contains("x&lt;img src=x onerror=document.title="));
    assert!(dom.contains("<span class=\"add\">+first</span>"));
    // The refused host, in the step's requests and in the summary with the line that allows it.
    assert!(dom.contains("<td>denied.example.org</td><td>443</td><td>refused</td><td>403</td>"));
    assert!(dom.contains("\"network\": {\"allow\": [\"denied.example.org\"]}"));
    // The MCP call against its pin.
    let pin = q::<String>(&t.db(), "SELECT header_json FROM runs");
    let pin: serde_json::Value = serde_json::from_str(&pin).unwrap();
    let echo_pin = pin["mcp"]["fx"]["tools"]["echo"].as_str().unwrap();
    assert!(dom.contains("class=\"mcp-server\">fx<") && dom.contains("class=\"mcp-tool\">echo<"));
    assert!(dom.contains(echo_pin), "the pin's hash");
    // The conversation: the instruction sent, the answer, its tool call, the tokens.
    assert!(dom.contains("Read notes.txt and summarise it."));
    assert!(dom.contains("calls <code>file_read("));
    assert!(dom.contains("class=\"msg assistant\""));
    assert!(dom.contains("Done. &lt;script&gt;"));
    assert!(dom.contains("completion tokens"));

    let shot = t.root.join("report.png");
    browse(
        &browser,
        &first,
        &[
            "--window-size=1280,1600",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "a real screenshot"
    );
}

/// A plan that is refused before any step runs still gets its page, naming why.
#[test]
fn a_refused_run_writes_a_page_naming_why() {
    let Some(browser) = chromium() else { return };
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "refused", "steps": [
            {"step_id": "a", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "x"}}]}),
    );
    let page = t.root.join("refused.html");
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--report-html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let dom = browse(&browser, &page, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("3 — plan not authorized"), "{dom}");
    assert!(dom.contains("not approved"), "{dom}");
}

/// A workspace where the one-step plan `tiny` (a file write) ran, approved.
fn tiny_run() -> TestDir {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "tiny", "steps": [
            {"step_id": "a", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "x"}}]}),
    );
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    t
}

/// `report` on an unknown run is a usage error that writes nothing; `-` writes to stdout.
#[test]
fn report_of_an_unknown_run_writes_nothing_and_dash_is_stdout() {
    let t = tiny_run();
    let page = t.root.join("none.html");
    let out = t.run(&["report", "ffffffff", "--html", page.to_str().unwrap()]);
    assert_exit_with(&out, 2, "run ffffffff not found");
    assert!(!page.exists());
    let out = t.run(&["report", "ffffffff"]);
    assert_exit_with(&out, 2, "--html");
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let out = t.run(&["report", &run_id, "--html", "-"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let html = stdout(&out);
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("tiny"),
        "{html}"
    );
}

/// A recorded header that does not read (the database changed outside acode-run) is said on the
/// page where the approval would be, not shown as a run recorded before headers were kept.
#[test]
fn an_unreadable_header_is_named_on_the_page() {
    let t = tiny_run();
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    t.db()
        .execute("UPDATE runs SET header_json = '{\"approval\": ['", [])
        .unwrap();
    let out = t.run(&["report", &run_id, "--html", "-"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let html = stdout(&out);
    assert!(
        html.contains(&format!("the header of run {run_id} cannot be read")),
        "{html}"
    );
    assert!(!html.contains("recorded from schema 13 on"), "{html}");
}

/// The report of the shipped `plans/agent-demo.json` (scripted model) renders with its
/// conversation, and its screenshot is the one in the README (`ACODE_UPDATE_SCREENSHOT=1`
/// writes docs/report.png from this run).
#[test]
fn the_agent_demo_report_is_the_readme_screenshot() {
    let Some(browser) = chromium() else { return };
    let t = TestDir::new();
    let root = repo();
    for f in ["Cargo.toml", "src/lib.rs"] {
        t.file(
            f,
            &std::fs::read_to_string(root.join("fixtures/agent-demo").join(f)).unwrap(),
        );
    }
    let server = ScriptedServer::start(
        ScriptedResponse::from_fixture(root.join("fixtures/llm/read_then_edit.json")).unwrap(),
    );
    let page = t.root.join("agent-demo.html");
    let plan = root.join("plans/agent-demo.json");
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        &server.url(),
        "--model",
        "test-model",
        "--report-html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let dom = browse_at(&browser, &page, "#expand-all", &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("<title>acode-run report: agent-demo (completed)</title>"));
    assert!(
        dom.contains("<b>model turn 3</b>") && dom.contains("412 prompt + 21 completion tokens")
    );
    assert!(
        dom.contains("<span class=\"add\">"),
        "the agent's edit as a diff"
    );
    // Every step open (the fragment ran the page's own script).
    assert!(
        !dom.contains("<details class=\"step completed\" id=\"s0\">"),
        "step 0 still closed"
    );

    let shot = t.root.join("report.png");
    browse_at(
        &browser,
        &page,
        "#expand-all",
        &[
            "--window-size=1100,1000",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "a real screenshot"
    );
    if std::env::var_os("ACODE_UPDATE_SCREENSHOT").is_some() {
        std::fs::write(root.join("docs/report.png"), &png).unwrap();
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains("docs/report.png"),
        "the README shows the screenshot"
    );
    assert!(root.join("docs/report.png").is_file());
}

/// A failure the plan tolerates (`"on_failure": "continue"`) reads "failed, tolerated" in the
/// legend's colour, on its box and its timeline bar, and the header counts it as such, whether
/// the run then completed or failed at a later step (issue 43 §3); a run's exit-code line says
/// what the run did and nothing about reviews.
#[test]
fn a_tolerated_failure_reads_failed_tolerated_in_the_legends_colour() {
    let t = TestDir::new();
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["sh"], "auto_approve_commands": ["sh"]}).to_string(),
    );
    let page_of = |plan_id: &str, last_fails: bool| {
        let plan = t.plan(
            &format!("{plan_id}.json"),
            &json!({"plan_id": plan_id, "steps": [
                {"step_id": "flaky", "tool": "run_command", "on_failure": "continue",
                 "arguments": {"argv": ["sh", "-c", "exit 3"]}},
                {"step_id": "after", "tool": "run_command", "depends_on": ["flaky"],
                 "arguments": {"argv": ["sh", "-c", if last_fails { "exit 5" } else { "true" }]}}]}),
        );
        let out = t.approve_and_run(&plan, &[]);
        assert_eq!(
            code(&out),
            if last_fails { 30 } else { 0 },
            "{}",
            stderr(&out)
        );
        let run_id: String = q(
            &t.db(),
            &format!("SELECT run_id FROM runs WHERE plan_id = '{plan_id}'"),
        );
        let out = t.run(&["report", &run_id, "--html", "-"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out)
    };
    for (plan_id, last_fails) in [("tolerant", false), ("tolerant-then-failed", true)] {
        let html = page_of(plan_id, last_fails);
        assert!(
            html.contains(
                "<span class=\"badge\">failed, tolerated</span><b class=\"step-id\">flaky</b>"
            ),
            "{plan_id}: {html}"
        );
        assert!(
            html.contains("<details class=\"step tolerated\" id=\"s0\""),
            "{plan_id}: the box in the legend's colour: {html}"
        );
        assert!(
            html.contains("<a class=\"b tolerated\" id=\"bar-0\""),
            "{plan_id}: the bar in the legend's colour: {html}"
        );
        let counts = if last_fails {
            "1 failed, 1 failed (tolerated)"
        } else {
            "1 completed, 1 failed (tolerated)"
        };
        assert!(
            html.contains(&format!("id=\"step-counts\">{counts}<")),
            "{plan_id}: {html}"
        );
        assert!(!html.contains("review"), "{plan_id}: {html}");
        if !last_fails {
            assert!(
                html.contains("0 — the run completed; 1 failed step tolerated"),
                "{html}"
            );
        }
    }
}
