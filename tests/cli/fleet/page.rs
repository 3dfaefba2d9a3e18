//! The fleet page: `report --html FILE` without a run id over a merged database, read in headless
//! Chromium — a row per repository linking to each run's section, hostile output inert, secrets
//! redacted, nothing fetched.

use std::sync::atomic::Ordering;

use super::*;
use crate::output::report::{browse, browse_at, chromium, counting_listener, hostile};

/// A GitHub token a repository's check prints, from two halves (so no file holds it whole).
const TOKEN_HALVES: (&str, &str) = ("ghp_16C7e42F292c6912E77", "10c838347Ae178B4a");

#[test]
fn the_fleet_page_has_a_row_per_repository_and_a_section_per_run() {
    let Some(browser) = chromium() else { return };
    let t = TestDir::new();
    let (port, hits) = counting_listener();
    let (plan, policy) = fleet_plan(&t);
    let records = t.root.join("records");
    std::fs::create_dir_all(&records).unwrap();
    approve_fleet(&t, &plan, &policy, &records.join("approval.db"));
    let mut dbs = Vec::new();
    for (name, b) in [
        ("alpha", Behaviour::Passes),
        ("beta", Behaviour::Fails),
        ("gamma", Behaviour::RefusedHost),
        ("hostile", Behaviour::Fails),
    ] {
        let repo = fleet_repository(&t, name, b);
        if name == "hostile" {
            std::fs::write(repo.join("payload.txt"), hostile(port)).unwrap();
            let script = format!(
                "import sys\nprint(open('payload.txt', encoding='utf-8').read(), file=sys.stderr)\nprint('token', {:?} + {:?}, file=sys.stderr)\nsys.exit(1)\n",
                TOKEN_HALVES.0, TOKEN_HALVES.1
            );
            std::fs::write(repo.join("check.py"), script).unwrap();
        }
        let db = records.join(format!("{name}.db"));
        run_fleet(&t, &plan, &policy, &repo, &db);
        dbs.push(db);
    }
    // alpha ran twice: its row is the newer run, the older one linked beside it.
    run_fleet(
        &t,
        &plan,
        &policy,
        &t.root.join("repos/alpha"),
        &records.join("alpha-again.db"),
    );
    let out = t.root.join("fleet.db");
    let merged = t.run(&[
        "merge",
        out.to_str().unwrap(),
        "--from-dir",
        records.to_str().unwrap(),
    ]);
    assert_eq!(code(&merged), 0, "{}", stderr(&merged));
    let page = t.root.join("fleet.html");
    let report = t.run(&[
        "report",
        "--html",
        page.to_str().unwrap(),
        "--db",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    let html = std::fs::read_to_string(&page).unwrap();
    let token = format!("{}{}", TOKEN_HALVES.0, TOKEN_HALVES.1);
    assert!(!html.contains(&token), "the token is on the page");
    assert!(html.contains("[REDACTED]"));
    assert!(!html.contains(URL_PASSWORD));
    assert_eq!(html.matches("<script").count(), 1, "one script element");
    for raw in [
        "<img",
        "<a href=\"javascript",
        "<link",
        "<meta http-equiv=\"refresh",
        "\u{202e}",
    ] {
        assert!(!html.contains(raw), "{raw:?} reached the page unescaped");
    }

    let dom = browse(
        &browser,
        &page,
        &["--virtual-time-budget=3000", "--dump-dom"],
    );
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    assert!(
        dom.contains("<title>acode-run fleet: 5 runs</title>"),
        "{}",
        &dom[..dom.len().min(800)]
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the page fetched from 127.0.0.1"
    );
    let rows = fleet_rows(&dom);
    assert_eq!(rows.len(), 4, "a row per repository: {rows:#?}");
    let row = |repo: &str| -> String {
        rows.iter()
            .find(|r| r.contains(&format!("fleet/{repo}.git")))
            .unwrap_or_else(|| panic!("no row for {repo}"))
            .to_string()
    };
    assert!(row("alpha").contains("completed") && row("alpha").contains("earlier:"));
    let beta = row("beta");
    assert!(
        beta.contains("class=\"failed\"") && beta.contains(">check (tool_failed)<pre>"),
        "{beta}"
    );
    assert!(
        beta.contains("FAILED: beta &lt;b&gt;&amp;amp;&lt;/b&gt;"),
        "{beta}"
    );
    assert!(
        beta.contains("<td>1: VERSION</td>"),
        "changed files: {beta}"
    );
    let gamma = row("gamma");
    assert!(gamma.contains(&format!("{REFUSED_HOST}:80")), "{gamma}");
    // Every row links to a section that is there.
    let db = rusqlite::Connection::open(&out).unwrap();
    let ids: Vec<String> = db
        .prepare("SELECT run_id FROM runs")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for id in &ids {
        assert!(
            dom.contains(&format!("id=\"run-{id}\"")),
            "no section for {id}"
        );
        assert!(
            dom.contains(&format!("href=\"#run-{id}\"")),
            "no link to {id}"
        );
    }
    // The link opens the run's section.
    let beta_id: String = q(
        &db,
        "SELECT run_id FROM runs WHERE repository LIKE '%/beta.git'",
    );
    let opened = browse_at(
        &browser,
        &page,
        &format!("#run-{beta_id}"),
        &["--virtual-time-budget=3000", "--dump-dom"],
    );
    let opened = String::from_utf8_lossy(&opened.stdout).into_owned();
    assert!(
        opened.contains(&format!(
            "<details class=\"run failed\" id=\"run-{beta_id}\" open=\"\">"
        )),
        "the section did not open"
    );
}

/// The DOM's `<tr>` elements of the fleet table, each as its text (the dump is HTML, not XML).
fn fleet_rows(dom: &str) -> Vec<String> {
    let Some(start) = dom
        .find("id=\"fleet\"")
        .and_then(|t| dom[t..].find("<tbody>").map(|b| t + b))
    else {
        return Vec::new();
    };
    let end = dom[start..]
        .find("</tbody>")
        .map_or(dom.len(), |e| start + e);
    dom[start..end]
        .split("</tr>")
        .filter_map(|r| r.find("<tr").map(|i| r[i..].to_string()))
        .collect()
}
