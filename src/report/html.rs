//! One self-contained HTML page of a run (issue 36, `docs/report.md`): the header (approval,
//! sandbox, exit code), a timeline with one lane per concurrent step, every step with its
//! executions (arguments, argv and program hash, diffs, output head and tail, network requests,
//! MCP calls with their pins, the agent's conversation), and the hosts that were refused with the
//! policy line that would allow each.
//!
//! Generated from the store's rows only. Every string that came from a plan, a file, a command, a
//! model or a server goes through [`escape`] — the one place text enters the page: redacted by
//! the run's [`Redactor`], control and bidi characters made visible (the terminal sanitiser's
//! rule), then HTML-escaped. Nothing from the record is ever put in a URL, a `style` or the
//! script. The page also carries a Content-Security-Policy that allows no fetch at all and only
//! its own inline script (by hash), so an escaping mistake could still neither run code nor
//! reach the network.
//!
//! Size: bodies of at most [`FULL_BODY_STEPS`] steps are written (all steps of a run that has no
//! more, else the steps that did not complete first), each cut at [`STEP_BODY_BYTES`] and all
//! together stopping at [`BODY_BUDGET`]; every output shows its first and last [`OUTPUT_LINES`]
//! lines within [`OUTPUT_CHARS`] characters each way. Other steps get a one-line row, and runs of
//! timeline bars too thin to see are drawn as one bar (docs/report.md has the resulting bound).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write;

use serde_json::Value;
use thiserror::Error;

use super::Refusal;
use crate::policy::network::NetworkRequest;
use crate::redact::Redactor;
use crate::store::{
    ArtifactCut, ExecutionRow, RunHeader, StepCounts, StepRow, StepState, Store, StoreError,
};

/// Steps whose bodies (executions, outputs, conversation) are written in full at most.
pub const FULL_BODY_STEPS: usize = 200;
/// A step's body stops (with a marker) once it is this long.
pub const STEP_BODY_BYTES: usize = 256 * 1024;
/// Once the bodies written reach this many bytes, the remaining steps get rows only.
pub const BODY_BUDGET: usize = 8 * 1024 * 1024;
/// Characters of an output read from each end (head and tail).
pub const OUTPUT_CHARS: usize = 4000;
/// Lines of an output shown from each end.
pub const OUTPUT_LINES: usize = 40;
/// Characters of a model request or answer read for the conversation (it is parsed as JSON).
const CONVERSATION_CHARS: usize = 256 * 1024;
/// Timeline bars narrower than this (percent of the run), back to back, of one outcome, are drawn
/// as one bar.
const MERGE_PCT: f64 = 0.1;
/// Refused hosts listed at most in the summary.
const REFUSED_HOSTS: usize = 200;

/// Why a report could not be written.
#[derive(Debug, Error)]
pub enum HtmlError {
    /// The database could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The file could not be written.
    #[error("cannot write the HTML report: {0}")]
    Io(#[from] std::io::Error),
}

/// The one function through which recorded text enters the page: redacted by `redactor`,
/// control and bidirectional-formatting characters shown as escapes (`\u{202e}`, as on a
/// terminal), then `& < > " '` escaped, so the result is inert in element content and in a
/// double-quoted attribute alike.
pub fn escape(redactor: &Redactor, s: &str) -> String {
    let redacted = redactor.redact(s);
    let visible = crate::terminal::text(&redacted);
    let mut out = String::with_capacity(visible.len() + 16);
    for c in visible.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
:root{--ok:#2e7d32;--fail:#c62828;--skip:#9e9e9e;--cancel:#ef6c00;--run:#1565c0;--bg:#fff;--fg:#1b1b1b;--mute:#666;--line:#ddd}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:16px 24px;color:var(--fg);background:var(--bg)}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:20px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;border:1px solid var(--line);border-radius:4px;padding:6px 8px;margin:4px 0;white-space:pre-wrap;word-break:break-all;max-height:480px;overflow:auto}
table{border-collapse:collapse}td,th{padding:2px 10px 2px 0;vertical-align:top;text-align:left}th{color:var(--mute);font-weight:normal;white-space:nowrap}
.facts td{overflow-wrap:anywhere}
.badge{display:inline-block;min-width:76px;text-align:center;border-radius:3px;color:#fff;font-size:12px;padding:0 6px;margin-right:6px}
.completed .badge,.b.completed{background:var(--ok)}.failed .badge,.b.failed{background:var(--fail)}
.tolerated .badge,.b.tolerated{background:#8d6e63}
.blocked .badge,.skipped .badge,.pending .badge,.b.blocked,.b.skipped,.b.pending{background:var(--skip)}
.cancelled .badge,.b.cancelled,.interrupted .badge,.b.interrupted{background:var(--cancel)}
.running .badge,.b.running{background:var(--run)}
.b.cancelled,.b.interrupted{background-image:repeating-linear-gradient(45deg,transparent 0 4px,rgba(255,255,255,.45) 4px 8px)}
.exit-ok{color:var(--ok)}.exit-bad{color:var(--fail)}
#timeline .axis{position:relative;height:16px;color:var(--mute);font-size:11px;border-bottom:1px solid var(--line);margin-left:90px}
#timeline .axis span{position:absolute;transform:translateX(-50%)}
.lane{display:flex;align-items:center;height:20px}.lane>.name{width:90px;color:var(--mute);font-size:11px}
.track{position:relative;flex:1;height:16px;background:#fafafa}
.b{position:absolute;top:1px;height:14px;min-width:2px;border-radius:2px;display:block;overflow:hidden;color:#fff;font-size:10px;line-height:14px;white-space:nowrap;text-decoration:none}
.b i{position:absolute;top:0;bottom:0;width:2px;background:#000;opacity:.55}
.legend span{margin-right:12px}.legend .b{position:static;display:inline-block;width:14px;vertical-align:middle;margin-right:4px}
.step{border:1px solid var(--line);border-radius:4px;margin:4px 0;content-visibility:auto;contain-intrinsic-size:auto 30px}
.step>summary,.step>.row{padding:4px 8px;cursor:pointer;list-style:none}.step>.row{cursor:default}
.step>summary::-webkit-details-marker{display:none}
.step>summary::before{content:"\25B8";color:var(--mute);margin-right:6px}.step[open]>summary::before{content:"\25BE"}
.step .body{padding:4px 12px 10px;border-top:1px solid var(--line)}
.step.failed{border-color:#e6a4a4}
.muted{color:var(--mute)}.err{color:var(--fail)}
.exec{border-left:3px solid var(--line);padding:2px 0 2px 10px;margin:8px 0}.exec.bad{border-left-color:#e6a4a4}
.exec .exec{margin-left:8px}
.diff .add{background:#e6ffed;display:block}.diff .del{background:#ffeef0;display:block}.diff .hunk{color:#6f42c1;display:block}
.cut{display:block;color:#8a6d00;background:#fff8e1;font-style:italic}
.msg{margin:4px 0;padding:2px 8px;border-left:3px solid #90caf9}.msg.assistant{border-left-color:#a5d6a7}.msg.tool{border-left-color:#ffcc80}.msg.system{border-left-color:#ce93d8}
.role{font-weight:600;font-size:12px}
.net td,.net th{font-size:12px}.refused{color:var(--fail)}
button{font:inherit;font-size:12px;margin-right:6px}
"#;

/// The page's only script: expand or collapse every step, open the step a link points to (or
/// every step for `#expand-all`).
const SCRIPT: &str = r#"(function(){
function all(open){document.querySelectorAll("details.step").forEach(function(d){d.open=open;});}
var x=document.getElementById("expand"),c=document.getElementById("collapse");
if(x)x.addEventListener("click",function(){all(true);});
if(c)c.addEventListener("click",function(){all(false);});
function reveal(){var id=location.hash.slice(1);if(id==="expand-all"){all(true);return;}if(!id)return;var e=document.getElementById(id);if(e&&e.tagName==="DETAILS")e.open=true;}
window.addEventListener("hashchange",reveal);reveal();
})();"#;

/// `<head>` with the policy that forbids every fetch and every script but [`SCRIPT`].
fn head(out: &mut String, title: &str) {
    head_with(out, title, "");
}

/// [`head`] with `extra` style rules after the page's own (the fleet page's).
pub(super) fn head_with(out: &mut String, title: &str, extra: &str) {
    use base64::Engine as _;
    use sha2::Digest as _;
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(SCRIPT));
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'sha256-{hash}'; img-src data:; base-uri 'none'; \
         form-action 'none'\">\n<meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta name=\"viewport\" content=\"width=device-width\">\n\
         <title>{title}</title>\n<style>{STYLE}{extra}</style></head>\n<body>\n"
    );
}

pub(super) fn foot(out: &mut String) {
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body></html>\n");
}

/// Seconds as the page shows a duration.
pub(super) fn secs(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// `N — what it means`.
pub(super) fn exit_meaning(code: i64) -> String {
    let meaning = i32::try_from(code)
        .ok()
        .and_then(crate::error::ExitCode::from_code)
        .map_or("not an acode-run exit code", |c| c.description());
    format!("{code} — {meaning}")
}

/// The page of an invocation that ended before any step ran (invalid plan, not authorized,
/// usage error): what it was about, the exit code and its meaning, the message and each problem.
pub fn render_refusal(refusal: &Refusal, redactor: &Redactor) -> String {
    let esc = |s: &str| escape(redactor, s);
    let mut out = String::new();
    head(
        &mut out,
        &format!("acode-run report: {} (refused)", esc(refusal.subject)),
    );
    let _ = write!(
        out,
        "<h1>acode-run: refused before any step ran</h1>\n<table class=\"facts\">\
         <tr><th>subject</th><td>{}</td></tr>\
         <tr><th>exit code</th><td class=\"exit-bad\">{}</td></tr>\
         <tr><th>at</th><td>{} UTC</td></tr></table>\n\
         <h2>Why</h2>\n<pre id=\"refusal\">{}</pre>\n",
        esc(refusal.subject),
        esc(&exit_meaning(i64::from(refusal.exit_code))),
        crate::error::format_ms(crate::error::now_ms()),
        esc(&refusal.text(redactor)),
    );
    foot(&mut out);
    out
}

/// Writes the report of run `run_id` (an id or a unique prefix) to `out`.
pub fn render(
    store: &Store,
    run_id: &str,
    redactor: &Redactor,
    out: &mut dyn Write,
) -> Result<(), HtmlError> {
    let detail = store.run_detail(run_id)?;
    let run = &detail.run;
    // A header that does not read is said on the page, not shown as one never recorded.
    let (header, header_unreadable) = match store.run_header(&run.run_id) {
        Ok(h) => (h, None),
        Err(e @ crate::store::StoreError::Unreadable { .. }) => (None, Some(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    let decisions = store.decisions(&run.plan_sha256)?;
    let network = store.run_network(&run.run_id)?;
    let attestation = store.attestation(&run.run_id).ok().flatten();
    // Where it ran (issue 48): recorded from schema 15 on; one that does not read is left out
    // here and said by `show`.
    let changes = store.run_changes(&run.run_id).ok().flatten();
    let narrowing = store.run_repository_policy(&run.run_id).ok().flatten();
    let page = Page {
        redactor,
        header: header.as_ref(),
        header_unreadable: header_unreadable.as_deref(),
        attestation: attestation.as_ref(),
        spend: store.step_spend(&run.run_id)?,
        changes: changes.as_ref(),
        narrowing: narrowing.as_ref(),
    };
    let mut out = std::io::BufWriter::new(out);

    let mut by_step: HashMap<&str, Vec<&ExecutionRow>> = HashMap::new();
    for e in &detail.executions {
        by_step.entry(&e.record.step_id).or_default().push(e);
    }

    let mut s = String::new();
    let status = run.status.as_str();
    head(
        &mut s,
        &format!("acode-run report: {} ({status})", page.esc(&run.plan_id)),
    );
    page.header(&mut s, &detail, &decisions, &network);
    page.refused_hosts(&mut s, &network, &by_step);
    page.timeline(
        &mut s,
        &detail.steps,
        &by_step,
        run.started_at,
        run.finished_at,
    );
    out.write_all(s.as_bytes())?;

    // Steps: full bodies for the first FULL_BODY_STEPS chosen, rows for the rest.
    let total = detail.steps.len();
    let mut full = vec![total <= FULL_BODY_STEPS; total];
    if total > FULL_BODY_STEPS {
        let mut chosen = 0;
        for (i, step) in detail.steps.iter().enumerate() {
            if chosen < FULL_BODY_STEPS && step.status != StepState::Completed {
                full[i] = true;
                chosen += 1;
            }
        }
    }
    let mut s = format!(
        "<h2 id=\"steps\">Steps ({total})</h2>\n<p><button id=\"expand\">expand all</button>\
         <button id=\"collapse\">collapse all</button>{}</p>\n",
        if total > FULL_BODY_STEPS {
            format!(
                " <span class=\"muted\">{total} steps: the bodies of completed steps are left out \
                 (at most {FULL_BODY_STEPS} step bodies, {} MiB, per page); <code>acode-run show {}</code> \
                 lists every execution</span>",
                BODY_BUDGET >> 20,
                page.esc(&run.run_id)
            )
        } else {
            String::new()
        }
    );
    let mut body_bytes = 0;
    for (i, step) in detail.steps.iter().enumerate() {
        let execs = by_step.get(step.step_id.as_str()).map_or(&[][..], |v| v);
        let before = s.len();
        let full = full[i] && body_bytes < BODY_BUDGET;
        page.step(&mut s, store, i, step, execs, full)?;
        if full {
            body_bytes += s.len() - before;
        }
        if s.len() > 64 * 1024 {
            out.write_all(s.as_bytes())?;
            s.clear();
        }
    }
    foot(&mut s);
    out.write_all(s.as_bytes())?;
    out.flush()?;
    Ok(())
}

struct Page<'a> {
    redactor: &'a Redactor,
    header: Option<&'a RunHeader>,
    /// Why the recorded header does not read, when it does not.
    header_unreadable: Option<&'a str>,
    /// The latest attestation written of the run.
    attestation: Option<&'a crate::store::AttestationRecord>,
    /// What each step spent on models: tokens, model calls, dollars (docs/observability.md).
    spend: std::collections::BTreeMap<String, crate::store::StepSpend>,
    /// The files the run left changed, when recorded.
    changes: Option<&'a crate::store::Changes>,
    /// What the workspace's own policy narrowed, when it had one.
    narrowing: Option<&'a crate::store::PolicyNarrowing>,
}

impl Page<'_> {
    fn esc(&self, s: &str) -> String {
        escape(self.redactor, s)
    }

    /// The files the run left changed: how many, and the first 20 with their status.
    fn changes_cell(&self, c: &crate::store::Changes) -> String {
        let e = |t: &str| self.esc(t);
        let names: Vec<String> = c
            .files
            .iter()
            .take(20)
            .map(|f| format!("<code>{} {}</code>", e(&f.status), e(&f.path)))
            .collect();
        format!(
            "{}{}{}",
            c.total,
            if names.is_empty() { "" } else { ": " },
            names.join(" ")
        )
    }

    /// What the workspace's own policy narrowed, and what of it was ignored.
    fn narrowing_cell(&self, n: &crate::store::PolicyNarrowing) -> String {
        let e = |t: &str| self.esc(t);
        let mut lines: Vec<String> = n
            .narrowed
            .iter()
            .map(|l| format!("narrowed: {}", e(l)))
            .collect();
        lines.extend(
            n.ignored
                .iter()
                .map(|l| format!("<span class=\"err\">ignored: {}</span>", e(l))),
        );
        format!("{}<br>{}", e(&n.path), lines.join("<br>"))
    }

    /// The run's exit code and what it means.
    fn exit_cell(&self, detail: &crate::store::RunDetail) -> String {
        let e = |t: &str| self.esc(t);
        let tolerated = detail.steps.iter().filter(|st| st.tolerated).count();
        match detail.run.exit_code {
            // A run's 0 says what this run did, not everything 0 means for every command (a
            // review's approval).
            Some(0) if tolerated > 0 => format!(
                "<span class=\"exit-ok\">0 — the run completed; {} tolerated \
                 (<code>\"on_failure\": \"continue\"</code>)</span>",
                crate::terminal::count(tolerated, "failed step")
            ),
            Some(0) => "<span class=\"exit-ok\">0 — every step completed</span>".to_string(),
            Some(c) => format!("<span class=\"exit-bad\">{}</span>", e(&exit_meaning(c))),
            None => "<span class=\"muted\">none recorded (the run did not finish)</span>".into(),
        }
    }

    /// Who approved the run, how the approval was signed and what policy it is bound to.
    fn approval_cell(&self) -> String {
        let e = |t: &str| self.esc(t);
        match self.header.map(|h| &h.approval) {
            Some(a) => {
                let signature = match (a.scheme.as_str(), a.signature.as_str()) {
                    ("ssh", "verified") => format!(
                        "<b>verified</b>: SSH signature{} by key{} {} listed in the policy's allowed_signers{}",
                        if a.signers.len() == 1 { "" } else { "s" },
                        if a.signers.len() == 1 { "" } else { "s" },
                        e(&a.signers.iter().map(|s| s.key.as_str()).collect::<Vec<_>>().join(", ")),
                        a.required.map(|n| format!(" ({n} distinct approver(s) required)")).unwrap_or_default()
                    ),
                    (_, "verified") => "signed with the shared HMAC approval key, verified (the name is claimed: any holder of the key can sign)".to_string(),
                    (_, "unchecked") => "signed, but no approval key or allowed_signers was in force to verify it (the name is claimed)".to_string(),
                    _ => "unsigned (the name is claimed: no approval key was in force)".to_string(),
                };
                let policy = if a.policy_sha256 == crate::plan::auth::NO_POLICY {
                    "the built-in default policy (no policy file)".to_string()
                } else {
                    format!("policy sha256 {}", e(&a.policy_sha256))
                };
                format!(
                    "approved by <b>{}</b> at {} UTC; {signature}; bound to {policy}, which held \
                         (a run under another policy is refused before it starts)",
                    e(&a.decided_by),
                    crate::error::format_ms(a.decided_at)
                )
            }
            None => match self.header_unreadable {
                Some(why) => format!("<span class=\"exit-bad\">{}</span>", e(why)),
                None => "<span class=\"muted\">not recorded for this run (recorded from \
                             schema 13 on)</span>"
                    .into(),
            },
        }
    }

    /// The latest attestation written of the run, or how to write one.
    fn attestation_cell(&self) -> String {
        let e = |t: &str| self.esc(t);
        match self.attestation {
            Some(a) => format!(
                "written to <code>{}</code>: {} file(s), signed by {} (sha256 {}); check it with <code>acode-run verify</code>",
                e(&a.path),
                a.subjects,
                e(&a.key),
                e(&a.sha256)
            ),
            None => "<span class=\"muted\">none written (run --attest FILE, or acode-run attest RUN_ID FILE)</span>".into(),
        }
    }

    /// Every decision recorded on the plan's hash: verdict, who, when, why.
    fn decisions_cell(&self, decisions: &[crate::store::DecisionRow]) -> String {
        let e = |t: &str| self.esc(t);
        let list: Vec<String> = decisions
            .iter()
            .map(|d| {
                format!(
                    "{} by {} at {} UTC{}",
                    d.verdict.as_str(),
                    e(&d.decided_by),
                    crate::error::format_ms(d.decided_at),
                    d.reason
                        .as_deref()
                        .map(|r| format!(" ({})", e(r)))
                        .unwrap_or_default()
                )
            })
            .collect();
        list.join("<br>")
    }

    /// The MCP servers' pinned identities and tool hashes.
    fn pins_cell(&self, h: &RunHeader) -> String {
        let e = |t: &str| self.esc(t);
        let mut pins = String::new();
        for (server, pin) in &h.mcp {
            let _ = write!(pins, "<b>{}</b>: {}<br>", e(server), e(&pin.identity));
            for (tool, sha) in &pin.tools {
                let _ = write!(pins, "&nbsp;&nbsp;{} <code>{}</code><br>", e(tool), e(sha));
            }
        }
        pins
    }

    fn header(
        &self,
        s: &mut String,
        detail: &crate::store::RunDetail,
        decisions: &[crate::store::DecisionRow],
        network: &[(Option<String>, NetworkRequest)],
    ) {
        let run = &detail.run;
        let e = |t: &str| self.esc(t);
        let _ = writeln!(
            s,
            "<h1>acode-run report: <span id=\"plan-id\">{}</span> <span class=\"{}\"><span class=\"badge\" id=\"run-status\">{}</span></span></h1>",
            e(&run.plan_id),
            run.status.as_str(),
            run.status.as_str()
        );
        s.push_str("<table class=\"facts\" id=\"header\">\n");
        let mut row = |k: &str, id: &str, v: String| {
            let _ = writeln!(s, "<tr><th>{k}</th><td id=\"{id}\">{v}</td></tr>");
        };
        row("run", "run-id", e(&run.run_id));
        row("plan sha256", "plan-sha256", e(&run.plan_sha256));
        if let Some(p) = &run.plan_path {
            row("plan file", "plan-path", e(p));
        }
        row("workspace", "workspace", e(&run.workspace));
        if run.repository.is_some() || run.commit.is_some() {
            row(
                "repository",
                "repository",
                format!(
                    "{} at <span class=\"mono\">{}</span>",
                    e(run.repository.as_deref().unwrap_or("(no origin)")),
                    e(run.commit.as_deref().unwrap_or("(no commit)"))
                ),
            );
        }
        if let Some(c) = self.changes {
            row("changed files", "changed-files", self.changes_cell(c));
        }
        if let Some(n) = self.narrowing {
            row(
                "repository policy",
                "repository-policy",
                self.narrowing_cell(n),
            );
        }
        let duration = run
            .finished_at
            .map(|f| format!(", {}", secs(f.saturating_sub(run.started_at))))
            .unwrap_or_default();
        row(
            "started",
            "started",
            format!(
                "{} UTC{}",
                crate::error::format_ms(run.started_at),
                duration
            ),
        );
        let exit = self.exit_cell(detail);
        row("exit code", "exit-code", exit);
        if let Some(lost) = &run.events_lost {
            row("--jsonl events", "events-lost", e(lost));
        }
        row("approval", "approval", self.approval_cell());
        row("attestation", "attestation", self.attestation_cell());
        if !decisions.is_empty() {
            row(
                "decisions on this hash",
                "decisions",
                self.decisions_cell(decisions),
            );
        }
        let sandbox = format!(
            "{}{}{}",
            e(run.sandbox.as_deref().unwrap_or("not recorded")),
            run.landlock_abi
                .map(|a| format!(" (Landlock ABI {a})"))
                .unwrap_or_default(),
            self.header
                .map(|h| format!(", requested {}", e(&h.sandbox_requested)))
                .unwrap_or_default()
        );
        row("sandbox", "sandbox", sandbox);
        if let Some(h) = self.header {
            let notes: Vec<String> = h.sandbox_notes.iter().map(|n| e(n)).collect();
            row(
                "sandbox notes",
                "sandbox-notes",
                if notes.is_empty() {
                    "<span class=\"muted\">none</span>".into()
                } else {
                    format!("<ul><li>{}</li></ul>", notes.join("</li><li>"))
                },
            );
            row("parallel steps", "jobs", format!("up to {}", h.jobs));
            if !h.mcp.is_empty() {
                row("MCP pins", "mcp-pins", self.pins_cell(h));
            }
        }
        let counts = detail.steps.iter().fold(BTreeMap::new(), |mut m, st| {
            let key = if st.tolerated {
                "failed (tolerated)"
            } else {
                st.status.as_str()
            };
            *m.entry(key).or_insert(0usize) += 1;
            m
        });
        row(
            "steps",
            "step-counts",
            counts
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        if run.prompt_tokens.saturating_add(run.completion_tokens) > 0 {
            row(
                "model tokens",
                "tokens",
                format!(
                    "{} prompt, {} completion",
                    run.prompt_tokens, run.completion_tokens
                ),
            );
        }
        let refused = network.iter().filter(|(_, r)| !r.allowed).count();
        row(
            "network requests",
            "network-count",
            format!("{} ({refused} refused)", network.len()),
        );
        s.push_str("</table>\n");
    }

    fn refused_hosts(
        &self,
        s: &mut String,
        network: &[(Option<String>, NetworkRequest)],
        by_step: &HashMap<&str, Vec<&ExecutionRow>>,
    ) {
        // (host, port) → (count, steps)
        let mut step_of: HashMap<&str, &str> = HashMap::new();
        for (step, execs) in by_step {
            for e in execs {
                step_of.insert(&e.record.execution_id, step);
            }
        }
        let mut refused: BTreeMap<(&str, u16), (usize, Vec<&str>)> = BTreeMap::new();
        for (exec, r) in network.iter().filter(|(_, r)| !r.allowed) {
            let entry = refused.entry((&r.host, r.port)).or_default();
            entry.0 += 1;
            let step = exec
                .as_deref()
                .and_then(|x| step_of.get(x).copied())
                .unwrap_or("(no command named)");
            if !entry.1.contains(&step) {
                entry.1.push(step);
            }
        }
        s.push_str("<h2 id=\"refused-hosts\">Refused hosts</h2>\n");
        if refused.is_empty() {
            s.push_str("<p class=\"muted\">No request was refused.</p>\n");
            return;
        }
        s.push_str(
            "<p>Each host a command asked for and the policy refused, with the line that would \
             allow it (in <code>acode-policy.json</code>; the plan must then be approved again).</p>\n\
             <table class=\"net\"><tr><th>host</th><th>port</th><th>requests</th><th>steps</th><th>would allow it</th></tr>\n",
        );
        for ((host, port), (count, steps)) in refused.iter().take(REFUSED_HOSTS) {
            let entry = crate::net::proxy::allow_entry(host, *port);
            let line = format!(
                "\"network\": {{\"allow\": [{}]}}",
                serde_json::Value::String(entry)
            );
            let _ = writeln!(
                s,
                "<tr class=\"refused-host\"><td>{}</td><td>{port}</td><td>{count}</td><td>{}</td><td><code>{}</code></td></tr>",
                self.esc(host),
                steps
                    .iter()
                    .map(|st| self.esc(st))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.esc(&line)
            );
        }
        s.push_str("</table>\n");
        if refused.len() > REFUSED_HOSTS {
            let _ = writeln!(
                s,
                "<p class=\"muted\">{} more refused hosts not listed.</p>",
                refused.len() - REFUSED_HOSTS
            );
        }
    }

    fn timeline(
        &self,
        s: &mut String,
        steps: &[StepRow],
        by_step: &HashMap<&str, Vec<&ExecutionRow>>,
        run_start: i64,
        run_end: Option<i64>,
    ) {
        let latest = steps
            .iter()
            .filter_map(|st| st.finished_at.or(st.started_at))
            .max()
            .unwrap_or(run_start);
        let end = run_end.unwrap_or(latest).max(latest);
        // Saturating: the times are the record's, and a tampered record may hold any i64.
        let total = end.saturating_sub(run_start);
        let span = total.max(1) as f64;
        let pct = |t: i64| (t.saturating_sub(run_start) as f64 / span * 100.0).clamp(0.0, 100.0);
        // Greedy lanes: each started step goes to the first lane free at its start.
        let mut order: Vec<(usize, i64, i64)> = steps
            .iter()
            .enumerate()
            .filter_map(|(i, st)| {
                st.started_at
                    .map(|b| (i, b, st.finished_at.unwrap_or(end).max(b)))
            })
            .collect();
        order.sort_by_key(|&(i, b, _)| (b, i));
        let mut lane_end: Vec<i64> = Vec::new();
        let mut lanes: Vec<Vec<(usize, i64, i64)>> = Vec::new();
        for (i, b, f) in order {
            let lane = match lane_end.iter().position(|&e| e <= b) {
                Some(l) => l,
                None => {
                    lane_end.push(i64::MIN);
                    lanes.push(Vec::new());
                    lane_end.len() - 1
                }
            };
            lane_end[lane] = f;
            lanes[lane].push((i, b, f));
        }
        let _ = write!(
            s,
            "<h2 id=\"timeline-title\">Timeline</h2>\n<section id=\"timeline\">\n\
             <p class=\"legend\"><span><span class=\"b completed\"></span>completed</span>\
             <span><span class=\"b failed\"></span>failed</span><span><span class=\"b tolerated\"></span>failed, tolerated</span>\
             <span><span class=\"b cancelled\"></span>cancelled / interrupted</span>\
             <span><span class=\"b running\"></span>running</span> <span class=\"muted\">a black tick: a retry began; \
             {}: steps that ran at the same time</span></p>\n<div class=\"axis\">",
            crate::terminal::count(lanes.len(), "lane")
        );
        for q in 0..=4 {
            let place = match q {
                0 => "left:0;transform:none".to_string(),
                4 => "right:0;transform:none".to_string(),
                q => format!("left:{}%", q * 25),
            };
            let _ = write!(
                s,
                "<span style=\"{place}\">{}</span>",
                secs((total as f64 * q as f64 / 4.0) as i64)
            );
        }
        s.push_str("</div>\n");
        for (n, lane) in lanes.iter().enumerate() {
            let _ = write!(
                s,
                "<div class=\"lane\" data-lane=\"{n}\"><span class=\"name\">lane {}</span><div class=\"track\">",
                n + 1
            );
            let mut k = 0;
            while k < lane.len() {
                let (i, b, mut f) = lane[k];
                let st = &steps[i];
                let left = pct(b);
                let class = bar_class(st);
                let execs = by_step.get(st.step_id.as_str()).map_or(&[][..], |v| v);
                let tries = attempts(execs);
                // Bars too thin to see, back to back, of one outcome and without retries, are
                // drawn as one (a 10 000-step run would otherwise draw 10 000 slivers).
                let mut last = k;
                let tiny = |b: i64, f: i64| pct(f) - pct(b) < MERGE_PCT;
                if tries == 1 && tiny(b, f) {
                    while let Some(&(j, nb, nf)) = lane.get(last + 1) {
                        let next = &steps[j];
                        let next_execs = by_step.get(next.step_id.as_str()).map_or(&[][..], |v| v);
                        if bar_class(next) != class
                            || !tiny(nb, nf)
                            || pct(nb) - pct(f) > MERGE_PCT
                            || attempts(next_execs) > 1
                        {
                            break;
                        }
                        last += 1;
                        f = nf;
                    }
                }
                let width = (pct(f) - left).max(0.0);
                let title = if last > k {
                    format!(
                        "{} steps, {} … {} · {} · {}",
                        last - k + 1,
                        self.esc(&st.step_id),
                        self.esc(&steps[lane[last].0].step_id),
                        class,
                        secs(f.saturating_sub(b))
                    )
                } else {
                    format!(
                        "{} · {class} · {}{}",
                        self.esc(&st.step_id),
                        secs(f.saturating_sub(b)),
                        if tries > 1 {
                            format!(" · {tries} attempts")
                        } else {
                            String::new()
                        }
                    )
                };
                let _ = write!(
                    s,
                    "<a class=\"b {class}\" id=\"bar-{i}\" href=\"#s{i}\" style=\"left:{left:.3}%;width:{width:.3}%\" title=\"{title}\">"
                );
                k = last + 1;
                if tries > 1 {
                    // A tick where each later attempt began.
                    let mut seen = std::collections::BTreeSet::new();
                    for e in execs {
                        let r = &e.record;
                        if r.attempt > 1 && r.tool_name != "llm" && seen.insert(r.attempt) {
                            let at = (r.started_at.saturating_sub(b) as f64
                                / f.saturating_sub(b).max(1) as f64
                                * 100.0)
                                .clamp(0.0, 100.0);
                            let _ = write!(s, "<i class=\"retry\" style=\"left:{at:.2}%\"></i>");
                        }
                    }
                    let _ = write!(s, "↻{tries}");
                }
                s.push_str("</a>");
            }
            s.push_str("</div></div>\n");
        }
        s.push_str("</section>\n");
    }

    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        s: &mut String,
        store: &Store,
        i: usize,
        st: &StepRow,
        execs: &[&ExecutionRow],
        full: bool,
    ) -> Result<(), StoreError> {
        let class = bar_class(st);
        let duration = match (st.started_at, st.finished_at) {
            (Some(b), Some(f)) => secs(f.saturating_sub(b)),
            _ => "—".into(),
        };
        let mut summary = format!(
            "<span class=\"badge\">{}</span><b class=\"step-id\">{}</b> <span class=\"muted\">{} · {duration}",
            status_text(st),
            self.esc(&st.step_id),
            self.esc(&st.tool),
        );
        let tries = attempts(execs);
        if tries > 1 {
            let _ = write!(summary, " · {tries} attempts");
        }
        if let Some((tokens, calls, cost)) = self.spend.get(&st.step_id) {
            let _ = write!(
                summary,
                " · <span class=\"spend\">{tokens} tokens, {calls} model call{}{}</span>",
                if *calls == 1 { "" } else { "s" },
                cost.map(|c| format!(", ${c:.4}")).unwrap_or_default()
            );
        }
        if let Some(code) = &st.error_code {
            let _ = write!(summary, " · {}", self.esc(code));
        }
        summary.push_str("</span>");
        if !full {
            let _ = writeln!(
                s,
                "<div class=\"step {class}\" id=\"s{i}\"><div class=\"row\">{summary}</div></div>"
            );
            return Ok(());
        }
        let open = if matches!(st.status, StepState::Completed | StepState::Skipped) {
            ""
        } else {
            " open"
        };
        let _ = writeln!(
            s,
            "<details class=\"step {class}\" id=\"s{i}\"{open}><summary>{summary}</summary><div class=\"body\">"
        );
        let start = s.len();
        if let Some(m) = &st.error_message {
            let _ = writeln!(s, "<pre class=\"err step-error\">{}</pre>", self.esc(m));
        }
        if execs.is_empty() {
            s.push_str("<p class=\"muted\">No tool execution was recorded for this step.</p>\n");
        }
        // Model turns hold the calls they asked for; everything else stands alone.
        let mut children: HashMap<&str, Vec<&ExecutionRow>> = HashMap::new();
        for e in execs {
            if let Some(p) = &e.record.parent_execution_id {
                children.entry(p).or_default().push(e);
            }
        }
        let ids: std::collections::HashSet<&str> = execs
            .iter()
            .map(|e| e.record.execution_id.as_str())
            .collect();
        let mut previous_messages: Vec<Value> = Vec::new();
        let mut shown = 0;
        for e in execs {
            if e.record
                .parent_execution_id
                .as_deref()
                .is_some_and(|p| ids.contains(p))
            {
                continue; // written under its turn
            }
            if s.len() - start > STEP_BODY_BYTES {
                break;
            }
            shown += 1;
            if e.record.tool_name == "llm" {
                self.turn(s, store, e, &mut previous_messages)?;
                for c in children
                    .get(e.record.execution_id.as_str())
                    .into_iter()
                    .flatten()
                {
                    shown += 1;
                    s.push_str("<div class=\"exec-children\">");
                    self.execution(s, store, c)?;
                    s.push_str("</div>");
                }
                s.push_str("</div>\n");
            } else {
                self.execution(s, store, e)?;
            }
        }
        if shown < execs.len() {
            let _ = writeln!(
                s,
                "<p class=\"cut\">{} more executions of this step are not shown (the page keeps each step under {} KiB); <code>acode-run show</code> lists them.</p>",
                execs.len() - shown,
                STEP_BODY_BYTES / 1024
            );
        }
        s.push_str("</div></details>\n");
        Ok(())
    }

    /// One tool execution: what it was called with, what it ran, changed, printed and reached.
    fn execution(&self, s: &mut String, store: &Store, e: &ExecutionRow) -> Result<(), StoreError> {
        let r = &e.record;
        let ok = r.success;
        let _ = write!(
            s,
            "<div class=\"exec{}\" data-tool=\"{}\"><div><b>{}</b> <span class=\"muted\">attempt {}{} · {} · {}</span>",
            if ok { "" } else { " bad" },
            self.esc(&r.tool_name),
            self.esc(&r.tool_name),
            r.attempt,
            r.turn.map(|t| format!(", turn {t}")).unwrap_or_default(),
            secs(r.duration_ms),
            if ok { "succeeded" } else { "failed" },
        );
        if let Some(c) = r.exit_code {
            let _ = write!(
                s,
                " <span class=\"exit-status {}\">exit status {c}</span>",
                if c == 0 { "exit-ok" } else { "exit-bad" }
            );
        }
        if let Some(code) = &r.error_code {
            let _ = write!(s, " <span class=\"err\">{}</span>", self.esc(code));
        }
        s.push_str("</div>\n");
        if let Some(m) = &r.error_message {
            let _ = writeln!(s, "<pre class=\"err\">{}</pre>", self.esc(m));
        }
        let args: Value = serde_json::from_str(&r.arguments_json).unwrap_or(Value::Null);
        // A command: its argv, the program it resolved to and that file's hash.
        let argv = match (&args["argv"], &args["command"]) {
            (Value::Array(a), _) => Some(
                a.iter()
                    .map(|v| {
                        let w = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                        shlex::try_quote(&w).map_or(w.clone(), |q| q.into_owned())
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            (_, Value::String(c)) => Some(c.clone()),
            _ => None,
        };
        if r.tool_name == "run_command" || r.program_path.is_some() {
            s.push_str("<table class=\"command\">");
            if let Some(a) = &argv {
                let _ = write!(
                    s,
                    "<tr><th>argv</th><td><code class=\"argv\">{}</code></td></tr>",
                    self.esc(a)
                );
            }
            if let Some(p) = &r.program_path {
                let _ = write!(
                    s,
                    "<tr><th>program</th><td><code class=\"program-path\">{}</code></td></tr>",
                    self.esc(p)
                );
            }
            if let Some(h) = &r.program_sha256 {
                let _ = write!(
                    s,
                    "<tr><th>sha256</th><td><code class=\"program-sha256\">{}</code></td></tr>",
                    self.esc(h)
                );
            }
            s.push_str("</table>\n");
        }
        if !args.is_null() && args != Value::Object(Default::default()) {
            let pretty = serde_json::to_string_pretty(&args).unwrap_or_default();
            let _ = write!(
                s,
                "<div class=\"muted\">arguments (after substitution)</div>"
            );
            self.output(s, "arguments", &pretty);
        }
        let cuts = store.artifact_cuts(&r.execution_id, OUTPUT_CHARS, OUTPUT_CHARS)?;
        for a in &cuts {
            match a.artifact_type.as_str() {
                "mcp_request" => self.mcp_call(s, &a.head),
                "diff" => self.diff(s, &self.cut_text(a, Some(&r.execution_id))),
                _ if a.stored_chars == 0 && a.bytes == 0 => {
                    let _ = writeln!(
                        s,
                        "<div class=\"muted\">{}: (empty)</div>",
                        self.esc(&a.artifact_type)
                    );
                }
                _ => {
                    let text = self.cut_text(a, Some(&r.execution_id));
                    let lossy = if a.lossy {
                        " (not valid UTF-8: shown lossily)"
                    } else {
                        ""
                    };
                    let _ = write!(
                        s,
                        "<div class=\"muted\">{} · {} bytes{lossy}</div>",
                        self.esc(&a.artifact_type),
                        a.bytes
                    );
                    self.output(s, &a.artifact_type, &text);
                }
            }
        }
        if !e.network.is_empty() {
            s.push_str("<table class=\"net\"><tr><th>method</th><th>host</th><th>port</th><th>allowed</th><th>status</th><th>bytes up/down</th><th>why</th></tr>\n");
            for n in &e.network {
                let _ = writeln!(
                    s,
                    "<tr class=\"net-request{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td></tr>",
                    if n.allowed { "" } else { " refused" },
                    self.esc(&n.method),
                    self.esc(&n.host),
                    n.port,
                    if n.allowed { "allowed" } else { "refused" },
                    n.status,
                    n.bytes_up,
                    n.bytes_down,
                    self.esc(&n.reason)
                );
            }
            s.push_str("</table>\n");
        }
        s.push_str("</div>\n");
        Ok(())
    }

    /// A diff artifact, each line classed (added, removed, hunk, cut).
    fn diff(&self, s: &mut String, text: &str) {
        let _ = write!(s, "<div class=\"muted\">diff</div><pre class=\"diff\">");
        for line in text.lines() {
            let class = if line.starts_with("+++") || line.starts_with("---") {
                "hunk"
            } else if line.starts_with('+') {
                "add"
            } else if line.starts_with('-') {
                "del"
            } else if line.starts_with("@@") {
                "hunk"
            } else if line.starts_with('\u{1}') {
                "cut"
            } else {
                ""
            };
            let line = line.strip_prefix('\u{1}').unwrap_or(line);
            if class.is_empty() {
                let _ = writeln!(s, "{}", self.esc(line));
            } else {
                let _ = write!(s, "<span class=\"{class}\">{}</span>", self.esc(line));
            }
        }
        s.push_str("</pre>\n");
    }

    /// An MCP call's server, tool and the pin it was checked against.
    fn mcp_call(&self, s: &mut String, request: &str) {
        let v: Value = serde_json::from_str(request).unwrap_or(Value::Null);
        let server = v["server"].as_str().unwrap_or("?");
        let tool = v["tool"].as_str().unwrap_or("?");
        let pin = self.header.and_then(|h| h.mcp.get(server)).map(|p| {
            (
                p.identity.as_str(),
                p.tools.get(tool).map_or("(not pinned)", String::as_str),
            )
        });
        let _ = writeln!(
            s,
            "<table class=\"mcp-call\"><tr><th>MCP server</th><td class=\"mcp-server\">{}</td></tr><tr><th>tool</th><td class=\"mcp-tool\">{}</td></tr><tr><th>pin</th><td class=\"mcp-pin\">{}</td></tr></table>",
            self.esc(server),
            self.esc(tool),
            match pin {
                Some((identity, sha)) =>
                    format!("{} <code>{}</code>", self.esc(identity), self.esc(sha)),
                None =>
                    "<span class=\"muted\">not recorded (run made before schema 13)</span>".into(),
            }
        );
    }

    /// The head and tail of an artifact with what was left out marked (a line starting with
    /// U+0001 is a marker: recorded text cannot hold one, [`escape`] shows it as `\x01`), and
    /// where the whole stored text is (`source`: the execution id) when something was left out.
    fn cut_text(&self, a: &ArtifactCut, source: Option<&str>) -> String {
        let head: Vec<&str> = a.head.lines().collect();
        let tail: Vec<&str> = a
            .tail
            .as_deref()
            .map(|t| t.lines().collect())
            .unwrap_or_default();
        let (first, last): (&[&str], &[&str]) = if a.tail.is_none() && head.len() > 2 * OUTPUT_LINES
        {
            (&head[..OUTPUT_LINES], &head[head.len() - OUTPUT_LINES..])
        } else {
            (
                &head[..head.len().min(OUTPUT_LINES)],
                &tail[tail.len().saturating_sub(OUTPUT_LINES)..],
            )
        };
        let count = |lines: &[&str], cap: usize| {
            lines
                .iter()
                .map(|l| l.chars().count() + 1)
                .sum::<usize>()
                .min(cap)
        };
        let shown = count(first, a.head.chars().count())
            + count(last, a.tail.as_deref().unwrap_or(&a.head).chars().count());
        let missing = usize::try_from(a.stored_chars)
            .unwrap_or(0)
            .saturating_sub(shown);
        let mut text = String::new();
        for l in first {
            text.push_str(l);
            text.push('\n');
        }
        if missing > 0 {
            let _ = writeln!(
                text,
                "\u{1}… {missing} of {} characters not shown …",
                a.stored_chars
            );
        }
        for l in last {
            text.push_str(l);
            text.push('\n');
        }
        if a.truncated {
            let _ = writeln!(
                text,
                "\u{1}… the output was cut when it was recorded: {} bytes produced, the first {} characters kept …",
                a.bytes, a.stored_chars
            );
        }
        if let Some(id) = source.filter(|_| missing > 0 || a.truncated) {
            let _ = writeln!(
                text,
                "\u{1}(stored text: acode-run artifact {id} {})",
                a.artifact_type
            );
        }
        text
    }

    /// A `<pre>` of `text`, marker lines (U+0001) shown as cut notes.
    fn output(&self, s: &mut String, kind: &str, text: &str) {
        let _ = write!(s, "<pre class=\"out out-{}\">", self.esc(kind));
        for line in text.lines() {
            match line.strip_prefix('\u{1}') {
                Some(marker) => {
                    let _ = write!(s, "<span class=\"cut\">{}</span>", self.esc(marker));
                }
                None => {
                    let _ = writeln!(s, "{}", self.esc(line));
                }
            }
        }
        s.push_str("</pre>\n");
    }

    /// One model turn: the messages the request added since the previous one, the answer with its
    /// tool calls, the token counts. Leaves its `<div>` open for the calls it asked for.
    fn turn(
        &self,
        s: &mut String,
        store: &Store,
        e: &ExecutionRow,
        previous: &mut Vec<Value>,
    ) -> Result<(), StoreError> {
        let r = &e.record;
        let _ = write!(
            s,
            "<div class=\"exec turn{}\"><div><b>model turn {}</b> <span class=\"muted\">attempt {} · {} · <span class=\"tokens\">{} prompt + {} completion tokens</span></span>",
            if r.success { "" } else { " bad" },
            r.turn.unwrap_or(0),
            r.attempt,
            secs(r.duration_ms),
            r.prompt_tokens.unwrap_or(0),
            r.completion_tokens.unwrap_or(0)
        );
        if let Some(code) = &r.error_code {
            let _ = write!(s, " <span class=\"err\">{}</span>", self.esc(code));
        }
        s.push_str("</div>\n");
        if let Some(m) = &r.error_message {
            let _ = writeln!(s, "<pre class=\"err\">{}</pre>", self.esc(m));
        }
        let cuts = store.artifact_cuts(&r.execution_id, CONVERSATION_CHARS, 0)?;
        for a in &cuts {
            let parsed: Option<Value> = if a.tail.is_none() {
                serde_json::from_str(&a.head).ok()
            } else {
                None
            };
            match (a.artifact_type.as_str(), parsed) {
                ("prompt", Some(body)) => {
                    let mut messages: Vec<Value> = Vec::new();
                    if let Some(system) = body.get("system") {
                        messages.push(serde_json::json!({"role": "system", "content": system}));
                    }
                    messages.extend(body["messages"].as_array().cloned().unwrap_or_default());
                    let same = previous
                        .iter()
                        .zip(&messages)
                        .take_while(|(a, b)| a == b)
                        .count();
                    let _ = write!(
                        s,
                        "<div class=\"request\"><div class=\"muted\">request: {} messages",
                        messages.len()
                    );
                    if same > 0 {
                        let _ = write!(s, " ({same} as in the previous request, not repeated)");
                    }
                    s.push_str("</div>\n");
                    for m in &messages[same..] {
                        self.message(s, m);
                    }
                    s.push_str("</div>\n");
                    *previous = messages;
                }
                ("response", Some(body)) => {
                    let message = body
                        .pointer("/choices/0/message")
                        .or_else(|| body.get("message"))
                        .cloned()
                        .unwrap_or_else(|| {
                            serde_json::json!({"role": "assistant", "content": body.get("content").cloned().unwrap_or(Value::Null)})
                        });
                    s.push_str("<div class=\"answer\"><div class=\"muted\">answer</div>\n");
                    self.message(s, &message);
                    s.push_str("</div>\n");
                }
                _ => {
                    let cut = ArtifactCut {
                        head: a.head.chars().take(OUTPUT_CHARS).collect(),
                        tail: None,
                        ..a.clone()
                    };
                    let text = self.cut_text(&cut, Some(&r.execution_id));
                    let _ = write!(
                        s,
                        "<div class=\"muted\">{} · {} bytes</div>",
                        self.esc(&a.artifact_type),
                        a.bytes
                    );
                    self.output(s, &a.artifact_type, &text);
                }
            }
        }
        Ok(())
    }

    /// One chat message in any provider's shape: its role, its text (a string or text blocks),
    /// the tool calls it makes and the tool results it carries.
    fn message(&self, s: &mut String, m: &Value) {
        let role = m["role"].as_str().unwrap_or("?");
        let class = match role {
            "assistant" | "tool" | "system" => role,
            _ => "user",
        };
        let _ = write!(
            s,
            "<div class=\"msg {class}\"><span class=\"role\">{}</span>",
            self.esc(role)
        );
        let mut texts: Vec<String> = Vec::new();
        let mut calls: Vec<String> = Vec::new();
        match &m["content"] {
            Value::String(t) => texts.push(t.clone()),
            Value::Array(blocks) => {
                for b in blocks {
                    match b["type"].as_str() {
                        Some("text") => texts.push(b["text"].as_str().unwrap_or("").to_string()),
                        Some("tool_use") => calls.push(format!(
                            "{}({})",
                            b["name"].as_str().unwrap_or("?"),
                            b["input"]
                        )),
                        Some("tool_result") => texts.push(match &b["content"] {
                            Value::String(t) => t.clone(),
                            other => other.to_string(),
                        }),
                        _ => texts.push(b.to_string()),
                    }
                }
            }
            Value::Null => {}
            other => texts.push(other.to_string()),
        }
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            let f = &c["function"];
            let args = match &f["arguments"] {
                Value::String(a) => a.clone(),
                other => other.to_string(),
            };
            calls.push(format!("{}({args})", f["name"].as_str().unwrap_or("?")));
        }
        if let Some(id) = m["tool_call_id"].as_str() {
            let _ = write!(
                s,
                " <span class=\"muted\">result of {}</span>",
                self.esc(id)
            );
        }
        s.push('\n');
        for t in texts.into_iter().filter(|t| !t.is_empty()) {
            let text = self.cut_text(
                &ArtifactCut {
                    artifact_type: "message".into(),
                    stored_chars: t.chars().count() as i64,
                    bytes: t.len() as i64,
                    head: t.chars().take(OUTPUT_CHARS).collect(),
                    tail: None,
                    truncated: false,
                    lossy: false,
                },
                None,
            );
            self.output(s, "message", &text);
        }
        for c in calls {
            let _ = writeln!(
                s,
                "<div class=\"tool-call\">calls <code>{}</code></div>",
                self.esc(&c)
            );
        }
        s.push_str("</div>\n");
    }
}

/// How many times the step's own tool call was attempted (retries of a transient failure); an
/// agent's calls and model turns are not attempts of the step.
fn attempts(execs: &[&ExecutionRow]) -> u32 {
    let Some(first) = execs.first() else {
        return 1;
    };
    StepCounts::of(&first.record.step_id, execs.iter().map(|e| &e.record))
        .attempts
        .max(1)
}

/// The class of a step's bar and box: its status, or `tolerated` for a failure the run went on
/// past (the legend's colour).
fn bar_class(st: &StepRow) -> &'static str {
    if st.tolerated {
        "tolerated"
    } else {
        st.status.as_str()
    }
}

/// A step's status in words: `failed, tolerated` for a failure the run went on past (the
/// legend's words), else the recorded status.
fn status_text(st: &StepRow) -> &'static str {
    if st.tolerated {
        "failed, tolerated"
    } else {
        st.status.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character that could open a tag, end an attribute or an entity is escaped; bidi
    /// and control characters become visible escapes; known secrets are gone.
    #[test]
    fn escape_makes_hostile_text_inert() {
        let redactor = Redactor::new();
        redactor.add_values(["hunter2-report-secret"]);
        let hostile = "<script>x</script>\"'&</style>\u{202e}\u{1b}[2J hunter2-report-secret";
        let out = escape(&redactor, hostile);
        assert_eq!(
            out,
            "&lt;script&gt;x&lt;/script&gt;&quot;&#39;&amp;&lt;/style&gt;\\u{202e}\\x1b[2J [REDACTED]"
        );
        for c in ['<', '>', '"', '\'', '\u{202e}', '\u{1b}'] {
            assert!(!out.contains(c), "{c:?} left in {out}");
        }
    }

    /// The policy's script hash is the hash of the script the page carries: a page whose own
    /// script the browser would block is caught here, not in a browser.
    #[test]
    fn the_content_security_policy_allows_exactly_the_page_script() {
        use base64::Engine as _;
        use sha2::Digest as _;
        let mut page = String::new();
        head(&mut page, "t");
        foot(&mut page);
        let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(SCRIPT));
        assert!(page.contains(&format!("script-src 'sha256-{hash}'")));
        assert!(page.contains(&format!("<script>{SCRIPT}</script>")));
        assert!(page.contains("default-src 'none'"));
    }

    /// An output longer than head and tail keeps both ends and says what is missing and where
    /// the whole text is.
    #[test]
    fn long_outputs_keep_both_ends_and_mark_the_cut() {
        let redactor = Redactor::new();
        let page = Page {
            redactor: &redactor,
            header: None,
            header_unreadable: None,
            attestation: None,
            spend: Default::default(),
            changes: None,
            narrowing: None,
        };
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let cut = ArtifactCut {
            artifact_type: "stdout".into(),
            head: text.clone(),
            tail: None,
            stored_chars: text.len() as i64,
            bytes: 20_000,
            truncated: true,
            lossy: false,
        };
        let shown = page.cut_text(&cut, Some("exec-1"));
        assert!(shown.starts_with("line 0\n"));
        assert!(shown.contains("line 39\n") && !shown.contains("line 40\n"));
        assert!(shown.contains("line 999\n") && !shown.contains("line 959\n"));
        assert!(shown.contains("characters not shown"));
        assert!(shown.contains("cut when it was recorded: 20000 bytes produced"));
        assert!(shown.contains("acode-run artifact exec-1 stdout"));
        let short = ArtifactCut {
            head: "ok\n".into(),
            stored_chars: 3,
            bytes: 3,
            truncated: false,
            ..cut
        };
        assert_eq!(page.cut_text(&short, Some("exec-1")), "ok\n");
    }
}
