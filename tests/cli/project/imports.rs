//! Imports point one way (issue 22): no circle between the modules of one folder. A test that
//! reads `src/` — every `crate::…` and `super::…` path outside comments and `#[cfg(test)]`
//! modules — builds, for each folder, the graph "a module of this folder uses a module of that
//! sibling", and fails on any cycle, naming it and one use that makes each edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path such as `["sandbox", "bwrap"]`.
pub(super) type ModPath = Vec<String>;

/// Every module of the crate (one per file), with its source minus comments and test modules.
pub(super) fn modules() -> BTreeMap<ModPath, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(&src) {
        let entry = entry.unwrap();
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(&src).unwrap().with_extension("");
        let mut segs: ModPath = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if segs == ["main"] {
            continue; // the binary is a separate crate
        }
        if segs.last().is_some_and(|s| s == "mod" || s == "lib") {
            segs.pop();
        }
        // A `tests.rs` beside a module is that module's `#[cfg(test)] mod tests`.
        if segs.last().is_some_and(|s| s == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        out.insert(segs, code_only(&text));
    }
    // A file declared `#[cfg(test)] mod name;` by its parent is test code too.
    let test_only: Vec<ModPath> = out
        .keys()
        .filter(|m| {
            let Some((name, parent)) = m.split_last() else {
                return false;
            };
            let file = if parent.is_empty() {
                src.join("lib.rs")
            } else {
                src.join(parent.join("/")).join("mod.rs")
            };
            std::fs::read_to_string(file).is_ok_and(|t| {
                let lines: Vec<&str> = t.lines().map(str::trim).collect();
                lines.windows(2).any(|w| {
                    w[0] == "#[cfg(test)]"
                        && w[1]
                            .trim_start_matches("pub(crate) ")
                            .trim_start_matches("pub ")
                            == format!("mod {name};")
                })
            })
        })
        .cloned()
        .collect();
    for m in test_only {
        out.remove(&m);
    }
    out
}

/// `pub use child::Item` (and `pub use child::{A, B}`) in each module: `(module, item)` → the
/// child module that defines it, so a use of `plan::ValidationContext` counts as a use of the
/// module defining it, not of the folder's `mod.rs`.
fn reexports(modules: &BTreeMap<ModPath, String>) -> BTreeMap<(ModPath, String), ModPath> {
    let mut out = BTreeMap::new();
    for (m, code) in modules {
        for line in code.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix("pub use ") else {
                continue;
            };
            let rest = rest.trim_start_matches("self::").trim_end_matches(';');
            let Some((child, items)) = rest.split_once("::") else {
                continue;
            };
            let mut target = m.clone();
            target.push(child.to_string());
            if !modules.contains_key(&target) {
                continue;
            }
            let items = items.trim_start_matches('{').trim_end_matches('}');
            for item in items.split(',') {
                let name = item.split(" as ").last().unwrap_or("").trim();
                let name = name.rsplit("::").next().unwrap_or(name);
                if !name.is_empty() {
                    out.insert((m.clone(), name.to_string()), target.clone());
                }
            }
        }
    }
    out
}

/// The text without `//` comments and without everything from a `#[cfg(test)]` module on (test
/// modules come last in this crate's files).
pub(super) fn code_only(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines.peek().is_some_and(|next| {
                next.trim_start().starts_with("mod ")
                    || next.trim_start().starts_with("pub(crate) mod ")
                    || next.trim_start().starts_with("pub mod ")
            })
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The module paths `code` (in module `me`) names through `crate::` and `super::`, each with
/// the text that names it.
fn references(me: &ModPath, is_dir_module: bool, code: &str) -> Vec<(ModPath, String)> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", {
            // `super` in a file module is its folder's module; in a `mod.rs`, the folder's parent.
            let mut p = me.clone();
            p.pop();
            if is_dir_module {
                p.pop();
            }
            p
        }),
    ] {
        let mut start = 0;
        while let Some(i) = code[start..].find(prefix) {
            let at = start + i;
            start = at + prefix.len();
            // Not part of a longer identifier (`my_crate::`).
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let rest = &code[start..];
            let mut targets: Vec<Vec<String>> = Vec::new();
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::b, c}`: each first-level entry.
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    targets.push(path_segments(item.trim()));
                }
            } else {
                targets.push(path_segments(rest));
            }
            for segs in targets {
                let mut full = base.clone();
                full.extend(segs);
                let line = code[..at].rfind('\n').map_or(0, |n| n + 1);
                let end = code[at..].find('\n').map_or(code.len(), |n| at + n);
                found.push((full, code[line..end].trim().to_string()));
            }
        }
    }
    found
}

/// `a::b::C` → `["a", "b", "C"]`, stopping at the first character that is not part of a path.
fn path_segments(s: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_alphanumeric() || c == '_' {
            cur.push(c);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            segs.push(std::mem::take(&mut cur));
        } else {
            break;
        }
    }
    if !cur.is_empty() {
        segs.push(cur);
    }
    segs
}

/// The longest known module that `path` starts with.
fn module_of<'a>(path: &[String], known: &'a BTreeSet<ModPath>) -> Option<&'a ModPath> {
    (0..=path.len())
        .rev()
        .find_map(|n| known.get(&path[..n].to_vec()))
}

/// Cycles among the children of each folder of the crate: `(folder, cycle, evidence per edge)`.
fn folder_cycles() -> Vec<(String, Vec<String>, Vec<String>)> {
    let modules = modules();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dirs: BTreeSet<ModPath> = modules
        .keys()
        .filter(|m| src.join(m.join("/")).join("mod.rs").exists())
        .cloned()
        .collect();
    cycles_in(&modules, &dirs)
}

/// Cycles among the children of each folder of `modules` (`dirs`: the `mod.rs` modules).
fn cycles_in(
    modules: &BTreeMap<ModPath, String>,
    dirs: &BTreeSet<ModPath>,
) -> Vec<(String, Vec<String>, Vec<String>)> {
    let known: BTreeSet<ModPath> = modules.keys().cloned().collect();
    let reexported = reexports(modules);
    // folder → (child → child → one use)
    let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    for (me, code) in modules {
        let is_dir = dirs.contains(me);
        for (target, text) in references(me, is_dir, code) {
            let Some(mut to) = module_of(&target, &known) else {
                continue;
            };
            // Through a re-export to the module that defines the item.
            while let Some(item) = target.get(to.len()) {
                match reexported.get(&(to.clone(), item.clone())) {
                    Some(def) if def != to => to = def,
                    _ => break,
                }
            }
            // The deepest folder both live in, and the child of it each lives under.
            let common = me.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == me.len() || common == to.len() {
                continue; // a module and its own ancestor or descendant
            }
            let folder = me[..common].to_vec();
            let (a, b) = (me[common].clone(), to[common].clone());
            graphs
                .entry(folder)
                .or_default()
                .entry(a)
                .or_default()
                .entry(b)
                .or_insert_with(|| format!("{}: {text}", me.join("::")));
        }
    }
    let mut cycles = Vec::new();
    for (folder, graph) in &graphs {
        for cycle in simple_cycles(graph) {
            let evidence = cycle
                .iter()
                .zip(cycle.iter().cycle().skip(1))
                .map(|(a, b)| graph[a][b].clone())
                .collect();
            cycles.push((folder.join("::"), cycle, evidence));
        }
    }
    cycles
}

/// One cycle per strongly connected component with more than one node (enough to name it).
fn simple_cycles(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = graph
        .keys()
        .chain(graph.values().flat_map(|m| m.keys()))
        .collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for next in graph.get(&n).into_iter().flat_map(|m| m.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for n in nodes {
        if done.contains(n) || !reach(n).contains(n) {
            continue;
        }
        // A shortest path back to `n`, by breadth-first search.
        let mut prev: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([n.clone()]);
        let mut last = None;
        'bfs: while let Some(cur) = queue.pop_front() {
            for next in graph.get(&cur).into_iter().flat_map(|m| m.keys()) {
                if next == n {
                    last = Some(cur.clone());
                    break 'bfs;
                }
                if !prev.contains_key(next) {
                    prev.insert(next.clone(), cur.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        let mut cycle = vec![];
        let mut cur = last;
        while let Some(c) = cur {
            cycle.push(c.clone());
            cur = if &c == n { None } else { prev.get(&c).cloned() };
        }
        cycle.reverse();
        for c in &cycle {
            done.insert(c.clone());
        }
        out.push(cycle);
    }
    out
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let cycles = folder_cycles();
    let report: Vec<String> = cycles
        .iter()
        .map(|(folder, cycle, evidence)| {
            format!(
                "in {}: {} -> {}\n    {}",
                if folder.is_empty() { "src" } else { folder },
                cycle.join(" -> "),
                cycle[0],
                evidence.join("\n    ")
            )
        })
        .collect();
    assert!(report.is_empty(), "import circles:\n{}", report.join("\n"));
}

/// The checker itself finds what it must: a circle through a `super::` use, one through a
/// `crate::{…}` group and a re-export, and nothing for uses of a parent or a one-way chain.
#[test]
fn the_circle_finder_finds_circles_and_nothing_else() {
    let m = |path: &str, code: &str| {
        (
            path.split("::").map(String::from).collect::<ModPath>(),
            code.to_string(),
        )
    };
    let modules: BTreeMap<ModPath, String> = [
        m("a", "pub use self::x::Thing;\n"),
        m("a::x", "use super::y::f;\n"),
        m("a::y", "fn g() { super::x::h() }\n"),
        m("b", "use crate::{a::Thing, c};\n"),
        m("c", "use crate::b::B; // crate::a::x\n"),
        m("d", "use crate::a::Thing;\n"),
        m("a::z", "use super::Thing; use crate::d::D;\n"),
    ]
    .into_iter()
    .collect();
    let dirs: BTreeSet<ModPath> = [vec!["a".to_string()]].into_iter().collect();
    let found = cycles_in(&modules, &dirs);
    let names: Vec<String> = found
        .iter()
        .map(|(f, c, _)| format!("{f}: {}", c.join(" -> ")))
        .collect();
    assert!(names.contains(&"a: x -> y".to_string()), "{names:?}");
    assert!(names.contains(&": b -> c".to_string()), "{names:?}");
    // a::z uses its parent's re-export of a::x (same folder: x, z) and crate::d, which uses a::x
    // again: a -> d -> a at the top.
    assert!(names.contains(&": a -> d".to_string()), "{names:?}");
    assert_eq!(names.len(), 3, "{names:?}");
}

/// The layers of the crate, top first (issue 35, docs/architecture.md): a module may use its own
/// layer and the ones below, never one above. Declared once, here.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["runner"],
    &[
        "executor", "stages", "import", "report", "preview", "attest",
    ],
    &["plan", "llm", "store", "events"],
    &["tools"],
    // The MCP protocol (client, pins): what the tools layer's MCP tools call, on top of the
    // sandbox's processes and network.
    &["mcp"],
    // The sandbox layers, each importing only those below it: OS confinement (bwrap, Landlock,
    // what each mode holds), network enforcement (the proxy, the runner's own HTTP agent), the
    // rules (the policy: commands, environment, hosts, programs, what a command sees), path
    // confinement in the workspace, and starting processes (spawn, the supervisor, seccomp).
    &["sandbox"],
    &["net"],
    &["policy"],
    &["workspace"],
    &["process"],
    &[
        "util", "error", "suggest", "terminal", "testing", "redact", "input",
    ],
];

/// Uses against [`LAYERS`] that the code still has, as `(from, to)` top-level modules: none
/// today. The test fails on any other, and on any of these that is gone (so the list only
/// shrinks).
const NOT_YET: &[(&str, &str)] = &[];

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

/// The top-level module a use names: its first segment, or for an item the crate root
/// re-exports (`crate::Executor`, `crate::{ApprovedPlan, exit}`: `pub use executor::Executor` in
/// `lib.rs`) the module that defines it, so a use through the front page is checked like the
/// path it stands for.
fn top_module_of(
    target: &[String],
    reexported: &BTreeMap<(ModPath, String), ModPath>,
) -> Option<String> {
    let first = target.first()?;
    if layer_of(first).is_some() {
        return Some(first.clone());
    }
    reexported
        .get(&(Vec::new(), first.clone()))
        .and_then(|def| def.first().cloned())
}

/// Every use of a higher layer's module, outside comments and test modules: `(from, to, module
/// and the text that uses it)`.
fn uses_against_the_layers() -> Vec<(String, String, String)> {
    let modules = modules();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dirs: BTreeSet<ModPath> = modules
        .keys()
        .filter(|m| src.join(m.join("/")).join("mod.rs").exists())
        .cloned()
        .collect();
    uses_against(&modules, &dirs)
}

/// [`uses_against_the_layers`] over `modules` (`dirs`: the `mod.rs` modules).
fn uses_against(
    modules: &BTreeMap<ModPath, String>,
    dirs: &BTreeSet<ModPath>,
) -> Vec<(String, String, String)> {
    let reexported = reexports(modules);
    let mut out = Vec::new();
    for (me, code) in modules {
        let Some(top) = me.first() else { continue };
        let Some(mine) = layer_of(top) else { continue };
        for (target, text) in references(me, dirs.contains(me), code) {
            let Some(to) = top_module_of(&target, &reexported) else {
                continue;
            };
            if &to == top {
                continue;
            }
            if let Some(theirs) = layer_of(&to)
                && theirs < mine
            {
                out.push((top.clone(), to, format!("src/{}: {text}", me.join("/"))));
            }
        }
    }
    out
}

#[test]
fn every_top_level_module_is_in_one_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let top = name.trim_end_matches(".rs");
        if top == "lib" || top == "main" {
            continue;
        }
        assert!(
            layer_of(top).is_some(),
            "src/{name} is in no layer: add it to LAYERS in tests/cli/project/imports.rs and to docs/architecture.md"
        );
    }
}

#[test]
fn imports_point_down_the_layers() {
    let found = uses_against_the_layers();
    let new: Vec<&(String, String, String)> = found
        .iter()
        .filter(|(from, to, _)| !NOT_YET.contains(&(from.as_str(), to.as_str())))
        .collect();
    assert!(
        new.is_empty(),
        "imports against the layers (LAYERS in tests/cli/project/imports.rs):\n{}",
        new.iter()
            .map(|(f, t, at)| format!("  {f} -> {t}: {at}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for (from, to) in NOT_YET {
        assert!(
            found.iter().any(|(f, t, _)| f == from && t == to),
            "{from} -> {to} no longer happens: remove it from NOT_YET (tests/cli/project/imports.rs) and \
             from docs/architecture.md"
        );
    }
}

#[test]
fn the_layer_check_finds_a_use_of_a_higher_layer() {
    // The same reading the real check makes, on a made-up module of the tools layer.
    let code = code_only("use crate::cli::Args;\n// crate::runner in a comment\nfn f() {}\n");
    let refs = references(&vec!["tools".to_string(), "x".to_string()], false, &code);
    let ups: Vec<&str> = refs
        .iter()
        .filter_map(|(t, _)| t.first())
        .filter(|to| layer_of(to).is_some_and(|l| l < layer_of("tools").unwrap()))
        .map(String::as_str)
        .collect();
    assert_eq!(ups, ["cli"]);
}

/// A use through an item the crate root re-exports (`crate::Executor`, `crate::{Plan, …}`) is
/// checked as a use of the module that defines it: an upward one is found, one downward or
/// within the layer is not.
#[test]
fn the_layer_check_follows_the_crate_roots_reexports() {
    let m = |path: &str, code: &str| {
        let path: ModPath = if path.is_empty() {
            Vec::new()
        } else {
            path.split("::").map(String::from).collect()
        };
        (path, code.to_string())
    };
    let modules: BTreeMap<ModPath, String> = [
        m(
            "",
            "pub use executor::{ExecutionError, Executor};\npub use error::exit;\n",
        ),
        m("executor", "pub struct Executor;\n"),
        m("error", "pub mod exit {}\n"),
        m("tools", "use crate::{Executor, exit};\n"),
        m("tools::x", "fn f() -> crate::ExecutionError { todo!() }\n"),
        m("stages", "use crate::Executor;\n"),
    ]
    .into_iter()
    .collect();
    let found = uses_against(&modules, &BTreeSet::from([vec!["tools".to_string()]]));
    let named: Vec<(&str, &str)> = found
        .iter()
        .map(|(f, t, _)| (f.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        named,
        [("tools", "executor"), ("tools", "executor")],
        "{found:?}"
    );
}

/// The line count of every `.rs` file under `dir`.
fn lines_under(dir: &Path) -> usize {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap().lines().count())
        .sum()
}

/// Issue 35: no top-level module holds more than a fifth of the code (the sandbox once held 30 %).
#[test]
fn no_top_level_module_holds_more_than_a_fifth_of_the_code() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let total = lines_under(&src);
    let mut over = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let lines = lines_under(&path);
        if lines * 5 > total {
            over.push(format!("{}: {lines} of {total} lines", path.display()));
        }
    }
    assert!(over.is_empty(), "{over:?}");
}

/// One module style: a folder's module is its `mod.rs`, never an `x.rs` beside an `x/`.
#[test]
fn no_module_file_stands_beside_its_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let beside: Vec<String> = walkdir::WalkDir::new(&src)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_dir() && e.path().with_extension("rs").exists())
        .map(|e| e.path().with_extension("rs").display().to_string())
        .collect();
    assert!(beside.is_empty(), "{beside:?}");
}
