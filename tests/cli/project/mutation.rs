//! The mutation-testing lists stay true (docs/testing.md): every hand-made attacker mutant
//! (`scripts/attacker-mutants/*.patch`) changes a file that exists, names at least one unit-level
//! or end-to-end test that exists, and is listed on docs/testing.md; every mutant
//! `.cargo/mutants.toml` excludes has its reason beside it. Running the mutants themselves is
//! `scripts/attacker-mutants.sh` (CI runs it); this only keeps the lists from rotting.

use crate::harness::*;

/// Every `fn NAME(` of the crate's sources and tests, as one text.
fn sources() -> String {
    let mut out = String::new();
    for dir in ["src", "tests"] {
        for entry in walkdir::WalkDir::new(repo().join(dir)) {
            let entry = entry.unwrap();
            if entry.path().extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(entry.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn every_attacker_mutant_names_tests_that_exist_and_is_documented() {
    let sources = sources();
    let doc = std::fs::read_to_string(repo().join("docs/testing.md")).unwrap();
    let dir = repo().join("scripts/attacker-mutants");
    let mut patches: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "patch"))
        .collect();
    patches.sort();
    assert!(patches.len() >= 10, "{patches:?}");
    let mut unit_level = 0;
    for patch in &patches {
        let name = patch.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(patch).unwrap();
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/testing.md does not list the attacker mutant `{name}`"
        );
        let why = text
            .lines()
            .take_while(|l| l.starts_with("# ") && !l.starts_with("# test: "))
            .count();
        assert!(why > 0, "{name}: no line saying why it matters");
        let files: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("+++ b/"))
            .collect();
        assert!(!files.is_empty(), "{name}: changes no file");
        for f in files {
            assert!(repo().join(f).is_file(), "{name}: no file {f}");
        }
        let tests: Vec<Vec<&str>> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# test: "))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(!tests.is_empty(), "{name}: names no test");
        for words in tests {
            let (level, filter) = (words[0], *words.last().unwrap());
            match (level, &words[1..words.len() - 1]) {
                ("unit", ["--lib"]) => unit_level += 1,
                ("cli", ["--test", "cli"]) => {}
                other => panic!("{name}: a test line of an unknown form: {other:?}"),
            }
            let function = filter.rsplit("::").next().unwrap();
            assert!(
                sources.contains(&format!("fn {function}(")),
                "{name}: names the test {filter}, which does not exist"
            );
        }
    }
    assert!(
        unit_level >= 10,
        "only {unit_level} unit-level tests: CI runs those"
    );
}

#[test]
fn every_mutant_left_out_says_why() {
    let text = std::fs::read_to_string(repo().join(".cargo/mutants.toml")).unwrap();
    let doc = std::fs::read_to_string(repo().join("docs/testing.md")).unwrap();
    // Whether the entry being read has a reason: a comment above it, or above the entries of
    // its group (consecutive entries share the comment above the first).
    let mut reason = false;
    let mut entries = 0;
    let mut in_list = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("exclude_re") {
            in_list = true;
            reason = false;
        } else if in_list && trimmed.starts_with('#') {
            reason = true;
        } else if in_list && (trimmed.starts_with('\'') || trimmed.starts_with('"')) {
            entries += 1;
            let quoted = trimmed.trim_end_matches(',');
            assert!(
                reason,
                ".cargo/mutants.toml: {quoted} has no reason above it"
            );
            let regex = match quoted.strip_prefix('\'') {
                Some(literal) => literal.trim_end_matches('\'').to_string(),
                None => serde_json::from_str::<String>(quoted).unwrap(),
            };
            assert!(
                doc.contains(&format!("`{regex}`")),
                "docs/testing.md does not list the excluded mutants `{regex}`"
            );
        } else if in_list && trimmed.starts_with(']') {
            in_list = false;
        } else if trimmed.is_empty() {
            reason = false;
        }
    }
    assert!(entries > 0, "no exclude_re entries found");
}
