//! What a reader of the code should not trip over (issue 43 §5): a doc naming a file or a module
//! path that moved, a public function nothing calls, a name or a mapping written in two places.
//! Each test reads the repository's own text.

use std::collections::BTreeMap;
use std::path::PathBuf;

use regex::Regex;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir` (relative to the repository), with its text.
fn rust_files(dir: &str) -> BTreeMap<PathBuf, String> {
    if !repo().join(dir).is_dir() {
        return BTreeMap::new();
    }
    walkdir::WalkDir::new(repo().join(dir))
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| {
            let rel = e.path().strip_prefix(repo()).unwrap().to_path_buf();
            (rel, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect()
}

/// `src/`'s modules minus comments and test code, by module path (`cli::exit_codes`).
fn code_of_src() -> BTreeMap<String, String> {
    super::imports::modules()
        .into_iter()
        .map(|(m, code)| (m.join("::"), code))
        .collect()
}

#[test]
fn the_docs_name_source_files_that_exist() {
    let path = Regex::new(r"`(src/[A-Za-z0-9_./-]+\.rs)[`:]").unwrap();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.push(repo().join("README.md"));
    let mut missing = Vec::new();
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (n, line) in text.lines().enumerate() {
            for c in path.captures_iter(line) {
                if !repo().join(&c[1]).is_file() {
                    missing.push(format!(
                        "{}:{}: {}",
                        doc.strip_prefix(repo()).unwrap().display(),
                        n + 1,
                        &c[1]
                    ));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files named by the docs that do not exist:\n{}",
        missing.join("\n")
    );
}

/// Whether `name` is defined (an item, a module, an enum variant) in `text`.
fn defines(text: &str, name: &str) -> bool {
    let item = Regex::new(&format!(
        r"(?m)\b(fn|struct|enum|mod|const|trait|type|static|macro_rules!)\s+{name}\b|^\s*{name}\s*[,({{]"
    ))
    .unwrap();
    item.is_match(text)
}

#[test]
fn module_paths_in_code_comments_name_what_is_there() {
    let src = repo().join("src");
    let top: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.trim_end_matches(".rs").to_string()
        })
        .collect();
    let path = Regex::new(&format!(
        r"`(?:crate::|acode_run::)?((?:{})(?:::[A-Za-z_][A-Za-z0-9_]*)+)`",
        top.join("|")
    ))
    .unwrap();
    let mut files = rust_files("src");
    files.extend(rust_files("fuzz/fuzz_targets"));
    let mut wrong = Vec::new();
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    for (file, text) in &files {
        for (n, line) in text.lines().enumerate() {
            if !line.trim_start().starts_with("//") {
                continue;
            }
            for c in path.captures_iter(line) {
                let segments: Vec<&str> = c[1].split("::").collect();
                let (first, last) = (segments[0], segments[segments.len() - 1]);
                // The module's own file, or every file of its folder.
                let module = modules.entry(first.to_string()).or_insert_with(|| {
                    rust_files(&format!("src/{first}"))
                        .into_values()
                        .chain(std::fs::read_to_string(src.join(format!("{first}.rs"))))
                        .collect()
                });
                if !defines(module, last) {
                    wrong.push(format!("{}:{}: {}", file.display(), n + 1, &c[1]));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "module paths in comments naming nothing in that module:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_path_checker_finds_a_path_naming_the_wrong_module() {
    let text = "pub struct Redactor;\nenum Kind {\n    Landlock,\n    Bwrap(u8),\n}\n";
    assert!(defines(text, "Redactor"));
    assert!(defines(text, "Landlock") && defines(text, "Bwrap"));
    assert!(!defines(text, "Redact") && !defines(text, "Kind2"));
}

#[test]
fn every_public_function_is_used() {
    let def = Regex::new(r"\bpub(?:\([a-z]+\))?\s+(?:const\s+)?fn\s+([a-z_][a-z0-9_]*)").unwrap();
    let word = Regex::new(r"\b[A-Za-z_][A-Za-z0-9_]*\b").unwrap();
    let fn_def = Regex::new(r"\bfn\s+([a-z_][a-z0-9_]*)").unwrap();
    // How often each word is written, and how often as a function's definition, in all the code.
    let (mut written, mut defined) = (BTreeMap::<String, usize>::new(), BTreeMap::new());
    for dir in ["src", "tests", "fuzz/fuzz_targets"] {
        for text in rust_files(dir).into_values() {
            for w in word.find_iter(&text) {
                *written.entry(w.as_str().to_string()).or_default() += 1;
            }
            for c in fn_def.captures_iter(&text) {
                *defined.entry(c[1].to_string()).or_insert(0usize) += 1;
            }
        }
    }
    let mut unused = Vec::new();
    for (module, code) in &code_of_src() {
        for c in def.captures_iter(code) {
            let name = &c[1];
            if written.get(name) <= defined.get(name) {
                unused.push(format!("{module}: {name}"));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "public functions nothing calls:\n{}",
        unused.join("\n")
    );
}

#[test]
fn the_state_directorys_name_is_written_once() {
    let literal = Regex::new(r#""\.acode[/"]"#).unwrap();
    let places: Vec<String> = code_of_src()
        .iter()
        .flat_map(|(file, code)| {
            code.lines()
                .filter(|l| literal.is_match(l))
                .map(move |l| format!("{file}: {}", l.trim()))
        })
        .collect();
    assert_eq!(
        places.len(),
        1,
        "the state directory's name must be written once (src/workspace/state.rs):\n{}",
        places.join("\n")
    );
    assert!(places[0].starts_with("workspace::state:"), "{places:?}");
}

#[test]
fn which_exit_code_a_store_or_report_error_gets_is_decided_in_exit_codes_rs_only() {
    let variant = Regex::new(r"\b(StoreError|HtmlError)::[A-Z]\w*").unwrap();
    let elsewhere: Vec<String> = code_of_src()
        .iter()
        .filter(|(module, _)| module.starts_with("cli") && *module != "cli::exit_codes")
        .flat_map(|(module, code)| {
            code.lines()
                .filter(|l| variant.is_match(l))
                .map(move |l| format!("{module}: {}", l.trim()))
        })
        .collect();
    assert!(
        elsewhere.is_empty(),
        "the CLI picks an exit code for a library error outside src/cli/exit_codes.rs:\n{}",
        elsewhere.join("\n")
    );
}

/// A test that cannot run here says so through the named-skip helper (`acode_run::testing::skip`:
/// logged, counted by `scripts/test.sh`, a failure under CI), never with a bare `eprintln!` and a
/// return that counts as passed (issue 43 §4).
#[test]
fn no_test_skips_with_a_bare_eprintln() {
    let skip = Regex::new(r#"eprintln!\(\s*"skip"#).unwrap();
    let mut bare = Vec::new();
    for (file, text) in rust_files("tests") {
        for m in skip.find_iter(&text) {
            let line = text[..m.start()].lines().count();
            bare.push(format!("{}:{line}", file.display()));
        }
    }
    assert!(
        bare.is_empty(),
        "skips that bypass acode_run::testing::skip:\n{}",
        bare.join("\n")
    );
}
