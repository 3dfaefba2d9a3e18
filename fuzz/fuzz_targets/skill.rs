//! SKILL.md front matter: `plan::skills::parse` (what `skills::find`/`list` call on the file).
//!
//! Properties: never a panic; a key written twice in the front matter (found independently,
//! line by line) is always refused; the body returned is exactly the text after the closing
//! `---` (or the whole text without front matter), and its line number is where it starts.
#![no_main]

use acode_run::plan::skills;
use libfuzzer_sys::fuzz_target;

/// The front matter's lines (between the first two `---` lines) when the text opens with one.
fn front_lines(text: &str) -> Option<Vec<&str>> {
    let mut lines = text.split_inclusive('\n');
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    let mut out = Vec::new();
    for l in lines {
        if l.trim_end() == "---" {
            return Some(out);
        }
        out.push(l);
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = skills::parse(text, ".acode/skills/fuzz/SKILL.md");
    let front = front_lines(text);
    if let Some(lines) = &front {
        let mut seen = std::collections::HashSet::new();
        let duplicate = lines.iter().any(|l| {
            let l = l.trim_end();
            let t = l.trim();
            // Indented lines, comments and `- item` lines are not keys (as in the parser).
            if l.starts_with([' ', '\t']) || t.starts_with('#') || t.starts_with("- ") || t == "-" {
                return false;
            }
            l.split_once(':')
                .map(|(k, _)| k.trim())
                .filter(|k| {
                    !k.is_empty()
                        && k.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                })
                .is_some_and(|k| !seen.insert(k.to_string()))
        });
        if duplicate {
            assert!(
                parsed.is_err(),
                "a front matter key written twice was accepted"
            );
        }
    }
    let Ok((_, body, line)) = parsed else { return };
    assert!(text.ends_with(&body), "the body is not the end of the file");
    let before = &text[..text.len() - body.len()];
    match &front {
        None => assert_eq!((body.as_str(), line), (text, 1)),
        Some(_) if !body.is_empty() => {
            assert_eq!(line, before.matches('\n').count() + 1, "body line")
        }
        Some(_) => {}
    }
});
