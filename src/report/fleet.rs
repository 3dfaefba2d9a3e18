//! The fleet page (issue 48): `acode-run report --html FILE` without a run id, over a database
//! of many runs (usually `acode-run merge`d from many machines) — one self-contained page with a
//! row per repository (its newest run: status, exit code, commit, changed files, the failing step
//! and the tail of what it printed, refused hosts, tokens) linking to each run's own section
//! (its facts, the repository policy's narrowing, changed files, steps, the failing step's
//! output, refused hosts; `acode-run report RUN_ID` has the rest).
//!
//! The same rules as the run's page (`html.rs`): one `escape` for every recorded text (redacted,
//! control characters visible, HTML-escaped), the same Content-Security-Policy (no fetch, only
//! the page's own script), nothing from the record in a URL but run ids (UUIDs, checked). Bounded:
//! each run's section stops at [`SECTION_BYTES`]; once the sections reach [`SECTIONS_BUDGET`]
//! the remaining runs keep their row, and their sections say to open the run's own report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

use super::html::{HtmlError, escape, exit_meaning, foot, head_with, secs};
use crate::redact::Redactor;
use crate::store::{FleetRun, RunStatus, StepState, Store};

/// Lines of the failing step's output in its row.
pub const ROW_TAIL_LINES: usize = 6;
/// Characters of the failing step's output in its row.
pub const ROW_TAIL_CHARS: usize = 500;
/// Changed files named in a row (the section lists more).
pub const ROW_FILES: usize = 3;
/// Refused hosts named in a row and in a section.
pub const REFUSED_HOSTS: usize = 20;
/// Repositories whose newest run did not complete named at the top of the page (the rest are
/// marked in the table).
pub const NOT_COMPLETED_LINKS: usize = 20;
/// Changed files listed in a section.
pub const SECTION_FILES: usize = 50;
/// Steps that did not complete listed in a section (the run's own report has every step).
pub const SECTION_STEPS: usize = 60;
/// A run's section stops once it is this long.
pub const SECTION_BYTES: usize = 24 * 1024;
/// Once the sections written reach this many bytes, the remaining runs get rows only.
pub const SECTIONS_BUDGET: usize = 7 * 1024 * 1024;

const FLEET_STYLE: &str = r#"
table.fleet{border-collapse:collapse;width:100%}table.fleet th,table.fleet td{border-bottom:1px solid var(--line);padding:4px 8px 4px 0}
table.fleet td.tail pre{max-height:8em;margin:2px 0;font-size:11px}
table.fleet tr.failed td:first-child{border-left:3px solid var(--fail);padding-left:6px}
table.fleet td.st{font-weight:600}table.fleet tr.completed td.st{color:var(--ok)}table.fleet tr.failed td.st{color:var(--fail)}
table.fleet tr.interrupted td.st,table.fleet tr.cancelled td.st{color:var(--cancel)}table.fleet tr.running td.st{color:var(--run)}
details.run{border:1px solid var(--line);border-radius:4px;margin:6px 0;content-visibility:auto;contain-intrinsic-size:auto 40px}
details.run>summary{padding:4px 8px;cursor:pointer}details.run>.body{padding:4px 12px 10px;border-top:1px solid var(--line)}
.counts span{margin-right:14px}
"#;

/// Whether `id` may stand in an `id` attribute and a `#` link as it is (a run id is a UUID; an id
/// a database was given by hand is linked through its position instead).
fn plain_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The anchor of run number `index` (its position on the page) with id `run_id`.
fn anchor(index: usize, run_id: &str) -> String {
    if plain_id(run_id) {
        format!("run-{run_id}")
    } else {
        format!("run-{index}")
    }
}

/// The last `lines` lines of `text`, within `chars` characters.
fn tail(text: &str, lines: usize, chars: usize) -> String {
    let kept: Vec<&str> = text.trim_end().lines().rev().take(lines).collect();
    let joined = kept.into_iter().rev().collect::<Vec<_>>().join("\n");
    let count = joined.chars().count();
    if count <= chars {
        joined
    } else {
        joined.chars().skip(count - chars).collect()
    }
}

/// Writes the fleet page of every plan run in `store` to `out`.
pub fn render(store: &Store, redactor: &Redactor, out: &mut dyn Write) -> Result<(), HtmlError> {
    let e = |s: &str| escape(redactor, s);
    let ids = store.fleet_run_ids()?;
    let mut out = std::io::BufWriter::new(out);
    let mut s = String::new();

    // The rows: a repository's newest run, with its earlier runs linked beside it.
    let mut rows: Vec<(FleetRun, Vec<(usize, FleetRun)>)> = Vec::new();
    let mut index_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let (mut prompt, mut completion, mut refused_total) = (0i64, 0i64, 0usize);
    let mut plans: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let run = store.fleet_run(id)?;
        *counts.entry(run.run.status.as_str()).or_default() += 1;
        prompt = prompt.saturating_add(run.run.prompt_tokens.max(0));
        completion = completion.saturating_add(run.run.completion_tokens.max(0));
        if !store.refused_hosts(id, 1)?.is_empty() {
            refused_total += 1;
        }
        *plans
            .entry((run.run.plan_id.clone(), run.run.plan_sha256.clone()))
            .or_default() += 1;
        index_of.insert(id.clone(), i);
        let key = run
            .run
            .repository
            .clone()
            .unwrap_or_else(|| run.run.workspace.clone());
        match rows.last_mut() {
            Some((newest, earlier))
                if newest
                    .run
                    .repository
                    .clone()
                    .unwrap_or_else(|| newest.run.workspace.clone())
                    == key =>
            {
                earlier.push((i, run));
            }
            _ => rows.push((run, Vec::new())),
        }
    }

    head_with(
        &mut s,
        &format!("acode-run fleet: {} runs", ids.len()),
        FLEET_STYLE,
    );
    let _ = writeln!(
        s,
        "<h1>acode-run fleet: <span id=\"run-count\">{}</span> runs in <span id=\"repo-count\">{}</span> repositories</h1>",
        ids.len(),
        rows.len()
    );
    s.push_str("<table class=\"facts\" id=\"summary\">\n");
    let plan_list: Vec<String> = plans
        .iter()
        .map(|((id, sha), n)| {
            format!(
                "{} <span class=\"mono muted\">sha256 {}</span> ({n} run{})",
                e(id),
                e(sha),
                if *n == 1 { "" } else { "s" }
            )
        })
        .collect();
    let _ = writeln!(
        s,
        "<tr><th>plans</th><td>{}</td></tr>",
        plan_list.join("<br>")
    );
    let status_list: Vec<String> = counts
        .iter()
        .map(|(status, n)| {
            format!("<span class=\"{status}\"><span class=\"badge\">{status}</span> <b id=\"count-{status}\">{n}</b></span>")
        })
        .collect();
    let _ = writeln!(
        s,
        "<tr><th>runs</th><td class=\"counts\">{}</td></tr>",
        status_list.join(" ")
    );
    let _ = writeln!(
        s,
        "<tr><th>tokens</th><td id=\"tokens\">{prompt} prompt + {completion} completion</td></tr>\n\
         <tr><th>runs with a refused host</th><td id=\"refused-total\">{refused_total}</td></tr>\n\
         <tr><th>written</th><td>{} UTC</td></tr>\n</table>",
        crate::error::format_ms(crate::error::now_ms())
    );
    not_completed(&mut s, redactor, &rows, &index_of);

    s.push_str(
        "<h2 id=\"repositories\">Repositories</h2>\n<table class=\"fleet\" id=\"fleet\">\n\
         <thead><tr><th>repository</th><th>status</th><th>exit</th><th>commit</th>\
         <th>changed files</th><th>failing step</th><th>refused hosts</th><th>tokens</th>\
         <th>run</th></tr></thead>\n<tbody>\n",
    );
    for (run, earlier) in &rows {
        let i = index_of[&run.run.run_id];
        row(&mut s, store, redactor, i, run, earlier)?;
        if s.len() > 64 * 1024 {
            out.write_all(s.as_bytes())?;
            s.clear();
        }
    }
    s.push_str("</tbody></table>\n");

    let _ = writeln!(
        s,
        "<h2 id=\"runs\">Runs</h2>\n<p><button id=\"expand\">expand all</button><button id=\"collapse\">collapse all</button>\
         <span class=\"muted\">each run's full report: <code>acode-run report RUN_ID --html FILE --db THIS.db</code></span></p>"
    );
    let mut written = 0usize;
    for (i, id) in ids.iter().enumerate() {
        let run = store.fleet_run(id)?;
        let before = s.len();
        if written < SECTIONS_BUDGET {
            section(&mut s, store, redactor, i, &run)?;
        } else {
            let _ = writeln!(
                s,
                "<details class=\"run\" id=\"{}\"><summary>{}</summary><div class=\"body muted\">\
                 Left out: the fleet page keeps its sections within {} MiB. \
                 <code>acode-run report {} --html FILE</code> shows this run.</div></details>",
                anchor(i, id),
                e(run.run.repository.as_deref().unwrap_or(&run.run.workspace)),
                SECTIONS_BUDGET >> 20,
                e(id)
            );
        }
        written += s.len() - before;
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

/// The repositories whose newest run did not complete, linked to their rows (at most
/// [`NOT_COMPLETED_LINKS`], then how many more); nothing when every one completed.
fn not_completed(
    s: &mut String,
    redactor: &Redactor,
    rows: &[(FleetRun, Vec<(usize, FleetRun)>)],
    index_of: &BTreeMap<String, usize>,
) {
    let e = |t: &str| escape(redactor, t);
    let not_completed: Vec<&FleetRun> = rows
        .iter()
        .map(|(r, _)| r)
        .filter(|r| r.run.status != RunStatus::Completed)
        .collect();
    if !not_completed.is_empty() {
        let links: Vec<String> = not_completed
            .iter()
            .take(NOT_COMPLETED_LINKS)
            .map(|r| {
                format!(
                    "<a href=\"#{}\">{}</a>",
                    anchor(index_of[&r.run.run_id], &r.run.run_id),
                    e(r.run.repository.as_deref().unwrap_or(&r.run.workspace))
                )
            })
            .collect();
        let _ = writeln!(
            *s,
            "<p id=\"not-completed\"><b>Not completed ({}):</b> {}{}</p>",
            not_completed.len(),
            links.join(", "),
            if not_completed.len() > NOT_COMPLETED_LINKS {
                format!(
                    " and {} more (their rows below are marked)",
                    not_completed.len() - NOT_COMPLETED_LINKS
                )
            } else {
                String::new()
            }
        );
    }
}

/// The status badge of a run.
fn badge(status: RunStatus) -> String {
    format!(
        "<span class=\"{0}\"><span class=\"badge\">{0}</span></span>",
        status.as_str()
    )
}

/// The changed files as a row cell: the count and the first few.
fn changed_cell(run: &FleetRun, e: &dyn Fn(&str) -> String) -> String {
    match &run.changes {
        None => "—".to_string(),
        Some(c) if c.total == 0 => "0".to_string(),
        Some(c) => {
            let names: Vec<String> = c.files.iter().take(ROW_FILES).map(|f| e(&f.path)).collect();
            format!(
                "{}: {}{}",
                c.total,
                names.join(" "),
                if c.total > ROW_FILES { " …" } else { "" }
            )
        }
    }
}

/// One repository's row: its newest run, and its earlier runs linked.
fn row(
    s: &mut String,
    store: &Store,
    redactor: &Redactor,
    i: usize,
    run: &FleetRun,
    earlier: &[(usize, FleetRun)],
) -> Result<(), HtmlError> {
    let e = |t: &str| escape(redactor, t);
    let r = &run.run;
    let link = anchor(i, &r.run_id);
    let failing = match store.failing_step(&r.run_id, 4 * ROW_TAIL_CHARS)? {
        Some((step, stdout, stderr)) => {
            let shown = if stderr.trim().is_empty() {
                &stdout
            } else {
                &stderr
            };
            format!(
                "{} ({})<pre>{}</pre>",
                e(&step.step_id),
                e(step.error_code.as_deref().unwrap_or("failed")),
                e(&tail(shown, ROW_TAIL_LINES, ROW_TAIL_CHARS))
            )
        }
        None => String::new(),
    };
    let refused: Vec<String> = store
        .refused_hosts(&r.run_id, REFUSED_HOSTS)?
        .iter()
        .map(|(h, p, n)| {
            format!(
                "{}:{p}{}",
                e(h),
                if *n > 1 {
                    format!(" ×{n}")
                } else {
                    String::new()
                }
            )
        })
        .collect();
    let earlier_links: Vec<String> = earlier
        .iter()
        .map(|(j, f)| {
            format!(
                "<a href=\"#{}\">{}</a> {}",
                anchor(*j, &f.run.run_id),
                e(&f.run.run_id.chars().take(8).collect::<String>()),
                f.run.status.as_str()
            )
        })
        .collect();
    let _ = writeln!(
        s,
        "<tr class=\"{status}\"><td><a href=\"#{link}\">{repo}</a></td>\
         <td class=\"st\">{status}</td><td>{exit}</td><td class=\"mono\">{commit}</td>\
         <td>{changed}</td><td class=\"tail\">{failing}</td><td>{refused}</td><td>{tokens}</td>\
         <td class=\"mono\">{short}{earlier}</td></tr>",
        status = r.status.as_str(),
        repo = e(r.repository.as_deref().unwrap_or(&r.workspace)),
        exit = r
            .exit_code
            .map_or_else(|| "—".to_string(), |c| c.to_string()),
        commit = e(&r
            .commit
            .as_deref()
            .map(|c| c.chars().take(12).collect::<String>())
            .unwrap_or_default()),
        changed = changed_cell(run, &e),
        refused = refused.join("<br>"),
        tokens = r.prompt_tokens.saturating_add(r.completion_tokens),
        short = e(&r.run_id.chars().take(8).collect::<String>()),
        earlier = if earlier_links.is_empty() {
            String::new()
        } else {
            format!("<br>earlier: {}", earlier_links.join(", "))
        },
    );
    Ok(())
}

/// A run's facts, as its section lists them: the run, plan, repository, commit, workspace, times,
/// exit code, sandbox, approver, tokens, where it was merged from and the repository's policy.
fn facts(run: &FleetRun) -> Vec<(&'static str, String)> {
    let r = &run.run;
    let mut facts: Vec<(&'static str, String)> = vec![
        ("run", r.run_id.clone()),
        (
            "plan",
            format!(
                "{} (sha256 {}…)",
                r.plan_id,
                r.plan_sha256.chars().take(16).collect::<String>()
            ),
        ),
    ];
    if let Some(repo) = &r.repository {
        facts.push(("repository", repo.clone()));
    }
    if let Some(commit) = &r.commit {
        facts.push(("commit", commit.clone()));
    }
    facts.push(("workspace", r.workspace.clone()));
    facts.push((
        "started",
        format!(
            "{} UTC{}",
            crate::error::format_ms(r.started_at),
            r.finished_at
                .map(|f| format!(", took {}", secs(f.saturating_sub(r.started_at))))
                .unwrap_or_default()
        ),
    ));
    facts.push((
        "exit code",
        r.exit_code.map_or_else(
            || "none recorded (the run did not finish)".to_string(),
            exit_meaning,
        ),
    ));
    facts.push((
        "sandbox",
        r.sandbox.clone().unwrap_or_else(|| "not recorded".into()),
    ));
    if let Some(by) = &run.approved_by {
        facts.push(("approved by", by.clone()));
    }
    facts.push((
        "tokens",
        format!(
            "{} prompt + {} completion",
            r.prompt_tokens, r.completion_tokens
        ),
    ));
    if let Some(source) = &run.merged_from {
        facts.push(("merged from", source.clone()));
    }
    if let Some(n) = &run.repository_policy {
        facts.push(("repo policy", n.path.clone()));
        for line in &n.narrowed {
            facts.push(("  narrowed", line.clone()));
        }
        for line in &n.ignored {
            facts.push(("  ignored", line.clone()));
        }
    }
    facts
}

/// The steps of a run that did not complete (at most [`SECTION_STEPS`]), after how many there are.
fn steps_not_completed(
    s: &mut String,
    store: &Store,
    redactor: &Redactor,
    run_id: &str,
) -> Result<(), HtmlError> {
    let e = |t: &str| escape(redactor, t);
    // The steps that did not complete (the run's own report has every step): a fleet's runs
    // mostly complete, and a page of a thousand runs is read for the ones that did not.
    let steps = store.steps(run_id)?;
    let listed: Vec<&crate::store::StepRow> = steps
        .iter()
        .filter(|st| st.status != StepState::Completed)
        .take(SECTION_STEPS)
        .collect();
    let completed = steps
        .iter()
        .filter(|st| st.status == StepState::Completed)
        .count();
    let _ = write!(
        s,
        "<h3>Steps: {} in all, {completed} completed{}</h3>",
        steps.len(),
        match listed.len() {
            0 => String::new(),
            n if n < steps.len() - completed => format!("; the first {n} others:"),
            _ => "; the others:".to_string(),
        }
    );
    let any = !listed.is_empty();
    if any {
        s.push_str("<pre class=\"steps\">");
    }
    for st in listed {
        let time = match (st.started_at, st.finished_at) {
            (Some(a), Some(b)) => secs(b.saturating_sub(a)),
            _ => String::new(),
        };
        let status = if st.status == StepState::Failed {
            "FAILED".to_string()
        } else {
            st.status.as_str().to_string()
        };
        let error = match (&st.error_code, &st.error_message) {
            (Some(c), m) => format!(
                "  [{c}] {}",
                crate::util::ellipsize(m.as_deref().unwrap_or(""), 300)
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "{:>3}. {:<20} {:<12} {:<10} {:>8}{}",
            st.position.saturating_add(1),
            e(&st.step_id),
            e(&st.tool),
            status,
            time,
            e(&error)
        );
    }
    if any {
        s.push_str("</pre>");
    }
    s.push('\n');
    Ok(())
}

/// One run's section: its facts, changed files, steps, failing step's output and refused hosts,
/// each a `<pre>` of plain lines — a handful of elements per run, so a page of a thousand runs
/// stays light for the browser to build (its sections are closed `<details>` until opened).
fn section(
    s: &mut String,
    store: &Store,
    redactor: &Redactor,
    i: usize,
    run: &FleetRun,
) -> Result<(), HtmlError> {
    let e = |t: &str| escape(redactor, t);
    let r = &run.run;
    let start = s.len();
    let _ = writeln!(
        s,
        "<details class=\"run {status}\" id=\"{anchor}\"><summary>{badge} <b>{repo}</b> \
         <span class=\"muted\">{plan} · run {id}</span></summary><div class=\"body\">",
        status = r.status.as_str(),
        anchor = anchor(i, &r.run_id),
        badge = badge(r.status),
        repo = e(r.repository.as_deref().unwrap_or(&r.workspace)),
        plan = e(&r.plan_id),
        id = e(&r.run_id),
    );
    let facts = facts(run);
    s.push_str("<pre class=\"facts\">");
    for (k, v) in &facts {
        let _ = writeln!(s, "{k:<12} {}", e(v));
    }
    s.push_str("</pre>\n");

    if let Some(c) = run.changes.as_ref().filter(|c| c.total > 0) {
        let _ = write!(s, "<h3>Changed files ({})</h3><pre>", c.total);
        for f in c.files.iter().take(SECTION_FILES) {
            let _ = writeln!(s, "{:<2} {}", e(&f.status), e(&f.path));
        }
        let shown = SECTION_FILES.min(c.files.len());
        if c.total > shown {
            let _ = writeln!(s, "… {} more", c.total - shown);
        }
        s.push_str("</pre>\n");
    }

    steps_not_completed(s, store, redactor, &r.run_id)?;

    if let Some((step, stdout, stderr)) =
        store.failing_step(&r.run_id, 2 * crate::tools::command::EXCERPT_BYTES)?
        && let Some(excerpt) = crate::tools::command::excerpt(&stdout, &stderr)
    {
        let _ = writeln!(
            s,
            "<h3>Failing step {}</h3><pre class=\"failure\">{}</pre>",
            e(&step.step_id),
            e(&excerpt)
        );
    }
    let refused = store.refused_hosts(&r.run_id, REFUSED_HOSTS)?;
    if !refused.is_empty() {
        s.push_str("<h3>Refused hosts</h3><pre class=\"refused\">");
        for (h, p, n) in refused {
            let _ = writeln!(s, "{}:{p} ×{n}", e(&h));
        }
        s.push_str("</pre>\n");
    }
    if s.len() - start > SECTION_BYTES {
        // The section is written again with only a pointer to the run's own report.
        s.truncate(start);
        let _ = write!(
            s,
            "<details class=\"run\" id=\"{}\"><summary>{} <b>{}</b></summary><div class=\"body muted\">\
             This run's section is longer than the fleet page keeps ({} KiB); \
             <code>acode-run report {} --html FILE</code> shows it.",
            anchor(i, &r.run_id),
            badge(r.status),
            e(r.repository.as_deref().unwrap_or(&r.workspace)),
            SECTION_BYTES >> 10,
            e(&r.run_id)
        );
    }
    s.push_str("</div></details>\n");
    Ok(())
}
