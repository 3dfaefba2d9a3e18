//! One approval, many workspaces (SPEC §3, issue 48): a repository's own `acode-policy.json` can
//! only narrow the policy a plan was approved under, never widen it.
//!
//! `approve PLAN --policy FILE` binds the approval to `FILE`; `run PLAN --policy FILE --workspace
//! REPO` checks that binding against `FILE` as today, and then runs under [`narrow`]`(FILE,
//! REPO/acode-policy.json)`: the **intersection** of the two — a command, a host, a variable, a
//! read path or an MCP tool reaches a step only when both policies allow it, each read as it is
//! written (a field a file leaves out has its default, as if that policy ran alone) — with the
//! stricter of each limit and sandbox mode, and every confirmation either asks for. What the
//! repository's file asks beyond the approved policy is ignored and said ([`Narrowed::ignored`]);
//! what it takes away from it is said too ([`Narrowed::narrowed`]). `docs/security.md` has the
//! table, field by field.
//!
//! Both policies are destructured field by field (no `..`): a field added to [`Policy`] or
//! [`Limits`] does not compile here until someone decides how two of them combine.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use super::network::{DEFAULT_PORTS, Entry, HostRule, NetworkPolicy, Pattern};
use super::{DEFAULT_ALLOWLIST, Limits, McpConfirm, McpPolicy, McpServer, Policy, SandboxMode};

/// The policy a run in a repository gets, and what the repository's policy changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Narrowed {
    /// The effective policy: allowed by both.
    pub policy: Policy,
    /// What the repository's policy asked for beyond the approved one: not granted.
    pub ignored: Vec<String>,
    /// What the approved policy allowed and the repository's does not: taken away.
    pub narrowed: Vec<String>,
}

/// How strict a sandbox mode is as a demand: `none` < `auto` (the best this machine has) <
/// `landlock` < `bwrap` (fails closed where it cannot run; Landlock inside).
fn strictness(mode: SandboxMode) -> u8 {
    match mode {
        SandboxMode::None => 0,
        SandboxMode::Auto => 1,
        SandboxMode::Landlock => 2,
        SandboxMode::Bwrap => 3,
    }
}

/// The policy allowed by both `approved` and `repository` (see the module docs).
pub fn narrow(approved: &Policy, repository: &Policy) -> Narrowed {
    let Policy {
        commands: _,
        allow_commands: _,
        auto_approve_commands: a_auto,
        confirm_tools: a_confirm,
        env_passthrough: a_env,
        sandbox: a_sandbox,
        limits: a_limits,
        read_paths: a_read,
        network: a_network,
        creates: a_creates,
        jobs: a_jobs,
        mcp: a_mcp,
        approvals: a_approvals,
        prices: a_prices,
        telemetry: a_telemetry,
    } = approved;
    let Policy {
        commands: _,
        allow_commands: _,
        auto_approve_commands: r_auto,
        confirm_tools: r_confirm,
        env_passthrough: r_env,
        sandbox: r_sandbox,
        limits: r_limits,
        read_paths: r_read,
        network: r_network,
        creates: r_creates,
        jobs: r_jobs,
        mcp: r_mcp,
        approvals: r_approvals,
        prices: r_prices,
        telemetry: r_telemetry,
    } = repository;
    let mut notes = Notes::default();

    let commands = programs(
        &allowed_entries(approved),
        &allowed_entries(repository),
        "commands",
        &mut notes,
    );
    let auto_approve_commands = programs(
        &entries(a_auto),
        &entries(r_auto),
        "auto_approve_commands",
        &mut notes,
    );

    let mut confirm_tools = a_confirm.clone();
    for tool in r_confirm {
        if !confirm_tools.contains(tool) {
            notes.narrowed(format!("confirm_tools {tool:?}: asks for confirmation"));
            confirm_tools.push(tool.clone());
        }
    }

    let env_passthrough = same_names(a_env, r_env, "env_passthrough", &mut notes);

    let sandbox = if strictness(*r_sandbox) > strictness(*a_sandbox) {
        notes.narrowed(format!(
            "sandbox {:?}: stricter than the approved {:?}",
            r_sandbox.as_str(),
            a_sandbox.as_str()
        ));
        *r_sandbox
    } else {
        if strictness(*r_sandbox) < strictness(*a_sandbox) {
            notes.ignored(format!(
                "sandbox {:?}: weaker than the approved {:?}",
                r_sandbox.as_str(),
                a_sandbox.as_str()
            ));
        }
        *a_sandbox
    };

    let limits = limits(a_limits, r_limits, &mut notes);
    let read_paths = read_paths(a_read, r_read, &mut notes);
    let network = network(a_network, r_network, &mut notes);
    let creates = same_names(a_creates, r_creates, "creates", &mut notes);
    let jobs = match (a_jobs, r_jobs) {
        (Some(a), Some(r)) if r < a => {
            notes.narrowed(format!("jobs {r}: fewer than the approved {a}"));
            Some(*r)
        }
        (Some(a), Some(r)) => {
            if r > a {
                notes.ignored(format!("jobs {r}: more than the approved {a}"));
            }
            Some(*a)
        }
        (Some(a), None) => Some(*a),
        (None, Some(r)) => {
            // Unset is one step at a time, the fewest there is.
            if *r > 1 {
                notes.ignored(format!("jobs {r}: more than the approved 1"));
            }
            None
        }
        (None, None) => None,
    };
    let mcp = mcp(a_mcp, r_mcp, &mut notes);
    // Who may approve is the approved policy's alone: the approval was checked against it before
    // the repository was looked at, and a repository naming its own signers would choose who
    // counts as an approver (docs/approvals.md).
    if !r_approvals.is_empty() && r_approvals != a_approvals {
        notes.ignored(
            "approvals: who may approve is the approved policy's (a repository cannot name its own signers)"
                .to_string(),
        );
    }
    // Prices count what a budget allows: the approved ones, so a repository cannot make a model
    // look cheaper.
    if !r_prices.is_empty() && r_prices != a_prices {
        notes.ignored("prices: the approved policy's prices count".to_string());
    }
    // Content leaves the machine only when both allow it.
    let telemetry = super::Telemetry {
        export_content: a_telemetry.export_content && r_telemetry.export_content,
    };
    if r_telemetry.export_content && !a_telemetry.export_content {
        notes.ignored("telemetry.export_content: not allowed by the approved policy".to_string());
    } else if a_telemetry.export_content && !r_telemetry.export_content {
        notes.narrowed("telemetry.export_content: off".to_string());
    }

    Narrowed {
        policy: Policy {
            commands: Some(commands),
            allow_commands: Vec::new(),
            auto_approve_commands,
            confirm_tools,
            env_passthrough,
            sandbox,
            limits,
            read_paths,
            network,
            creates,
            jobs,
            mcp,
            approvals: a_approvals.clone(),
            prices: a_prices.clone(),
            telemetry,
        },
        ignored: notes.ignored,
        narrowed: notes.narrowed,
    }
}

#[derive(Default)]
struct Notes {
    ignored: Vec<String>,
    narrowed: Vec<String>,
}

impl Notes {
    fn ignored(&mut self, s: String) {
        self.ignored.push(s);
    }
    fn narrowed(&mut self, s: String) {
        self.narrowed.push(s);
    }
}

/// A program entry as compared: a workspace path without its leading `./` (`./gradlew` and
/// `gradlew/..` are told apart by the `/` the entry is written with, which stays).
fn norm(entry: &str) -> &str {
    entry.strip_prefix("./").unwrap_or(entry)
}

/// The entries of a command list as written, each once (compared by [`norm`]), in order.
fn entries(list: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    list.iter()
        .filter(|e| seen.insert((super::is_path_entry(e), norm(e).to_string())))
        .cloned()
        .collect()
}

/// Every program entry a policy allows: its `commands` (or the built-in allowlist) and its
/// `allow_commands`.
fn allowed_entries(p: &Policy) -> Vec<String> {
    let base: Vec<String> = match &p.commands {
        Some(list) => list.clone(),
        None => DEFAULT_ALLOWLIST.iter().map(|s| s.to_string()).collect(),
    };
    entries(&[base, p.allow_commands.clone()].concat())
}

/// Whether a program-path entry holds glob syntax (and so names more than one path).
fn is_glob(entry: &str) -> bool {
    entry.contains(['*', '?', '[', '{'])
}

/// Whether program entry `entry` of one list is allowed by the entries `by` of the other: a bare
/// name by the same name; a workspace path by the same entry, or (a plain path) by a glob there.
fn entry_covered(entry: &str, by: &[String]) -> bool {
    if !super::is_path_entry(entry) {
        return by.iter().any(|b| !super::is_path_entry(b) && b == entry);
    }
    by.iter().filter(|b| super::is_path_entry(b)).any(|b| {
        norm(b) == norm(entry)
            || (!is_glob(entry)
                && super::glob::Glob::new(norm(b)).is_ok_and(|g| g.is_match(norm(entry))))
    })
}

/// The program entries both lists allow (approved order first), with notes.
fn programs(approved: &[String], repo: &[String], field: &str, notes: &mut Notes) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in approved {
        if entry_covered(a, repo) {
            out.push(a.clone());
        } else {
            notes.narrowed(format!(
                "{field} {a:?}: not allowed by the repository's policy"
            ));
        }
    }
    for r in repo {
        if out
            .iter()
            .any(|o| super::is_path_entry(o) == super::is_path_entry(r) && norm(o) == norm(r))
        {
            continue;
        }
        if entry_covered(r, approved) {
            // A plain path a glob of the approved policy allows, named by the repository.
            out.push(r.clone());
        } else {
            notes.ignored(format!("{field} {r:?}: not in the approved policy"));
        }
    }
    out
}

/// The names in both lists (approved order), with notes.
fn same_names(approved: &[String], repo: &[String], field: &str, notes: &mut Notes) -> Vec<String> {
    for r in repo.iter().filter(|r| !approved.contains(r)) {
        notes.ignored(format!("{field} {r:?}: not in the approved policy"));
    }
    approved
        .iter()
        .filter(|a| {
            let kept = repo.contains(a);
            if !kept {
                notes.narrowed(format!("{field} {a:?}: not in the repository's policy"));
            }
            kept
        })
        .cloned()
        .collect()
}

/// The stricter of each limit.
fn limits(a: &Limits, r: &Limits, notes: &mut Notes) -> Limits {
    let Limits {
        output_bytes: a_output,
        read_bytes: a_read,
        timeout_s: a_timeout,
        tool_result_chars: a_chars,
        max_results: a_results,
        memory_mb: a_memory,
        file_size_mb: a_fsize,
        cpu_s: a_cpu,
        open_files: a_files,
    } = a;
    let Limits {
        output_bytes: r_output,
        read_bytes: r_read,
        timeout_s: r_timeout,
        tool_result_chars: r_chars,
        max_results: r_results,
        memory_mb: r_memory,
        file_size_mb: r_fsize,
        cpu_s: r_cpu,
        open_files: r_files,
    } = r;
    // `unlimited_at_zero`: 0 means "not limited" for this limit, the loosest value.
    let mut pick = |name: &str, a: u64, r: u64, unlimited_at_zero: bool| -> u64 {
        let rank = |v: u64| {
            if unlimited_at_zero && v == 0 {
                u64::MAX
            } else {
                v
            }
        };
        if rank(r) < rank(a) {
            notes.narrowed(format!("limits.{name} {r}: stricter than the approved {a}"));
            r
        } else {
            if rank(r) > rank(a) {
                notes.ignored(format!("limits.{name} {r}: looser than the approved {a}"));
            }
            a
        }
    };
    let as_u64 = |v: usize| v as u64;
    let back = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let output_bytes = back(pick(
        "output_bytes",
        as_u64(*a_output),
        as_u64(*r_output),
        false,
    ));
    let read_bytes = back(pick("read_bytes", as_u64(*a_read), as_u64(*r_read), false));
    let timeout_s = pick("timeout_s", *a_timeout, *r_timeout, false);
    let tool_result_chars = back(pick(
        "tool_result_chars",
        as_u64(*a_chars),
        as_u64(*r_chars),
        false,
    ));
    let max_results = back(pick(
        "max_results",
        as_u64(*a_results),
        as_u64(*r_results),
        false,
    ));
    let memory_mb = pick("memory_mb", *a_memory, *r_memory, true);
    let file_size_mb = pick("file_size_mb", *a_fsize, *r_fsize, true);
    let open_files = pick("open_files", *a_files, *r_files, true);
    // `None`: the step's timeout, the loosest.
    let cpu_s = match (a_cpu, r_cpu) {
        (Some(a), Some(r)) => Some(pick("cpu_s", *a, *r, false)),
        (Some(a), None) => Some(*a),
        (None, Some(r)) => {
            notes.narrowed(format!(
                "limits.cpu_s {r}: stricter than the approved step timeout"
            ));
            Some(*r)
        }
        (None, None) => None,
    };
    Limits {
        output_bytes,
        read_bytes,
        timeout_s,
        tool_result_chars,
        max_results,
        memory_mb,
        file_size_mb,
        cpu_s,
        open_files,
    }
}

/// Whether `p` is absolute with no `.` or `..` component (so that a lexical comparison of
/// components is a comparison of places).
fn plain_absolute(p: &Path) -> bool {
    p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// Whether `inner` is `outer` or lies beneath it, as the file system resolves both (links
/// followed): a repository naming `/opt/node/link` with `link` leading to `/home` is not beneath
/// `/opt/node`.
fn beneath(inner: &Path, outer: &Path) -> bool {
    if !plain_absolute(inner) || !plain_absolute(outer) {
        return false;
    }
    if inner == outer {
        return true;
    }
    match (inner.canonicalize(), outer.canonicalize()) {
        (Ok(i), Ok(o)) => inner.starts_with(outer) && i.starts_with(&o),
        _ => false,
    }
}

/// The read paths both allow: an approved path the repository names (or names a part of), and a
/// repository path beneath an approved one.
fn read_paths(approved: &[PathBuf], repo: &[PathBuf], notes: &mut Notes) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for a in approved {
        if repo.iter().any(|r| beneath(a, r)) {
            out.push(a.clone());
        } else if !repo.iter().any(|r| beneath(r, a)) {
            notes.narrowed(format!(
                "read_paths {:?}: not in the repository's policy",
                a.display().to_string()
            ));
        }
    }
    for r in repo {
        if out.contains(r) {
            continue;
        }
        if approved.iter().any(|a| beneath(r, a)) {
            out.push(r.clone());
        } else {
            notes.ignored(format!(
                "read_paths {:?}: not beneath a path of the approved policy",
                r.display().to_string()
            ));
        }
    }
    out
}

/// The ports both allow: `None` is 80 and 443.
fn ports(a: Option<u16>, r: Option<u16>) -> Option<Option<u16>> {
    match (a, r) {
        (None, None) => Some(None),
        (None, Some(p)) | (Some(p), None) => DEFAULT_PORTS.contains(&p).then_some(Some(p)),
        (Some(p), Some(q)) => (p == q).then_some(Some(p)),
    }
}

/// Whether `name` is a strict subdomain of `domain`.
fn subdomain(name: &str, domain: &str) -> bool {
    name.strip_suffix(domain)
        .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.'))
}

/// The hosts both patterns match, as one pattern (for these patterns the intersection always is
/// one, or nothing).
fn patterns(a: &Pattern, r: &Pattern) -> Option<Pattern> {
    match (a, r) {
        (Pattern::Name(x), Pattern::Name(y)) => (x == y).then(|| a.clone()),
        (Pattern::Name(n), Pattern::Subdomains(s)) | (Pattern::Subdomains(s), Pattern::Name(n)) => {
            subdomain(n, s).then(|| Pattern::Name(n.clone()))
        }
        (Pattern::Subdomains(x), Pattern::Subdomains(y)) => {
            if x == y || subdomain(x, y) {
                Some(a.clone())
            } else if subdomain(y, x) {
                Some(r.clone())
            } else {
                None
            }
        }
        (Pattern::Ip(x), Pattern::Ip(y)) => (x == y).then(|| a.clone()),
        _ => None,
    }
}

/// A rule as a `network.allow` entry.
fn rule_text(pattern: &Pattern, port: Option<u16>) -> String {
    let host = match pattern {
        Pattern::Name(n) => n.clone(),
        Pattern::Subdomains(n) => format!("*.{n}"),
        Pattern::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        Pattern::Ip(ip) => ip.to_string(),
    };
    match port {
        Some(p) => format!("{host}:{p}"),
        None => host,
    }
}

/// The entries both network policies allow: each pair's intersection (`registry:NAME` only when
/// both name that registry, whose hosts are found at run start).
fn network(a: &NetworkPolicy, r: &NetworkPolicy, notes: &mut Notes) -> NetworkPolicy {
    // Both were checked when their files were read; an entry that does not parse allows nothing.
    let parse = |list: &[String]| -> Vec<(String, Entry)> {
        list.iter()
            .filter_map(|t| Entry::parse(t).ok().map(|e| (t.clone(), e)))
            .collect()
    };
    let (a_entries, r_entries) = (parse(&a.allow), parse(&r.allow));
    let meet = |x: &Entry, y: &Entry| -> Option<String> {
        match (x, y) {
            (Entry::Registry(p), Entry::Registry(q)) if p == q => {
                Some(format!("registry:{}", registry_name(p)))
            }
            (
                Entry::Host(HostRule {
                    pattern: px,
                    port: ox,
                    ..
                }),
                Entry::Host(HostRule {
                    pattern: py,
                    port: oy,
                    ..
                }),
            ) => {
                let port = ports(*ox, *oy)?;
                patterns(px, py).map(|p| rule_text(&p, port))
            }
            _ => None,
        }
    };
    let mut allow: Vec<String> = Vec::new();
    for (text, x) in &a_entries {
        let met: Vec<String> = r_entries.iter().filter_map(|(_, y)| meet(x, y)).collect();
        let whole = met
            .iter()
            .any(|m| Entry::parse(m).ok().as_ref() == Some(x) || m == text);
        if met.is_empty() {
            notes.narrowed(format!(
                "network.allow {text:?}: not allowed by the repository's policy"
            ));
        } else if !whole {
            notes.narrowed(format!("network.allow {text:?}: only {}", met.join(", ")));
        }
        for m in met {
            if !allow.contains(&m) {
                allow.push(m);
            }
        }
    }
    for (text, y) in &r_entries {
        if !a_entries.iter().any(|(_, x)| meet(x, y).is_some()) {
            notes.ignored(format!(
                "network.allow {text:?}: not allowed by the approved policy"
            ));
        }
    }
    NetworkPolicy { allow }
}

/// The name a `registry:` entry is written with.
fn registry_name(r: &super::network::Registry) -> &'static str {
    use super::network::Registry;
    match r {
        Registry::Cargo => "cargo",
        Registry::Npm => "npm",
        Registry::Pypi => "pypi",
    }
}

/// What declares an MCP server besides its tools and confirmations: how it is started or
/// reached, its headers, environment and timeouts.
fn declaration(s: &McpServer) -> impl PartialEq + '_ {
    let McpServer {
        command,
        url,
        headers,
        ca_cert,
        env,
        tools: _,
        confirm: _,
        startup_timeout_s,
        call_timeout_s,
    } = s;
    (
        command,
        url,
        headers,
        ca_cert,
        env,
        startup_timeout_s,
        call_timeout_s,
    )
}

/// The MCP servers both declare alike (same program or endpoint, headers, environment and
/// timeouts), each with the tools both list; a call asks for confirmation when either says so.
fn mcp(a: &McpPolicy, r: &McpPolicy, notes: &mut Notes) -> McpPolicy {
    let mut servers = std::collections::BTreeMap::new();
    for (name, x) in &a.servers {
        let Some(y) = r.servers.get(name) else {
            notes.narrowed(format!(
                "mcp.servers.{name}: not in the repository's policy"
            ));
            continue;
        };
        if declaration(x) != declaration(y) {
            notes.ignored(format!(
                "mcp.servers.{name}: declared otherwise than in the approved policy (the approved \
                 declaration is used)"
            ));
        }
        let tools: Vec<String> = x
            .tools
            .iter()
            .filter(|t| y.tools.contains(t))
            .cloned()
            .collect();
        for t in x.tools.iter().filter(|t| !y.tools.contains(t)) {
            notes.narrowed(format!(
                "mcp.servers.{name}.tools {t:?}: not in the repository's policy"
            ));
        }
        for t in y.tools.iter().filter(|t| !x.tools.contains(t)) {
            notes.ignored(format!(
                "mcp.servers.{name}.tools {t:?}: not in the approved policy"
            ));
        }
        if tools.is_empty() {
            continue;
        }
        let asking: Vec<String> = tools
            .iter()
            .filter(|t| x.confirms(t) || y.confirms(t))
            .cloned()
            .collect();
        let confirm = if asking.len() == tools.len() {
            None
        } else if asking.is_empty() {
            Some(McpConfirm::All(false))
        } else {
            Some(McpConfirm::Tools(asking))
        };
        if tools.iter().any(|t| !x.confirms(t) && y.confirms(t)) {
            notes.narrowed(format!("mcp.servers.{name}.confirm: asks for more calls"));
        }
        servers.insert(
            name.clone(),
            McpServer {
                tools,
                confirm,
                ..x.clone()
            },
        );
    }
    for name in r.servers.keys().filter(|n| !a.servers.contains_key(*n)) {
        notes.ignored(format!("mcp.servers.{name}: not in the approved policy"));
    }
    McpPolicy { servers }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Policy {
        Policy::parse(text).unwrap()
    }

    #[test]
    fn a_policy_narrowed_by_itself_allows_the_same() {
        for text in [
            "{}",
            r#"{"commands": ["git", "./gradlew", ".venv/bin/*"], "env_passthrough": ["CI"],
                "sandbox": "bwrap", "network": {"allow": ["*.example.org", "api.x.io:8443", "registry:npm"]},
                "limits": {"memory_mb": 0, "cpu_s": 5}, "jobs": 4, "creates": ["node_modules"]}"#,
        ] {
            let a = p(text);
            let n = narrow(&a, &a);
            assert!(n.ignored.is_empty() && n.narrowed.is_empty(), "{n:?}");
            for prog in ["git", "cargo", "curl", "python3"] {
                assert_eq!(
                    n.policy.command_allowed(prog),
                    a.command_allowed(prog),
                    "{prog}"
                );
            }
            assert_eq!(n.policy.network.allow, a.network.allow);
            assert_eq!(n.policy.limits, a.limits);
            assert_eq!(n.policy.sandbox, a.sandbox);
            assert_eq!(n.policy.env_passthrough, a.env_passthrough);
            assert_eq!(n.policy.jobs, a.jobs);
        }
    }

    /// The attack: a repository's policy that grants itself a program, a host, a variable, a
    /// weaker sandbox, looser limits, a read path and more parallelism gets none of them, and
    /// each is named as ignored.
    #[test]
    fn a_repository_cannot_widen_the_approved_policy() {
        let approved = p(r#"{"commands": ["git", "cat"], "sandbox": "landlock",
            "network": {"allow": ["api.example.org"]}, "env_passthrough": ["CI"],
            "limits": {"memory_mb": 512, "timeout_s": 60}, "read_paths": ["/usr/share"]}"#);
        let repo = p(
            r#"{"commands": ["git", "cat", "curl"], "allow_commands": ["./evil.sh"],
            "auto_approve_commands": ["curl"], "sandbox": "none",
            "network": {"allow": ["api.example.org", "evil.example.net", "*.example.org:8443"]},
            "env_passthrough": ["CI", "AWS_SECRET_ACCESS_KEY"], "jobs": 8,
            "limits": {"memory_mb": 0, "timeout_s": 3600}, "read_paths": ["/usr/share", "/home"],
            "creates": ["x"]}"#,
        );
        let n = narrow(&approved, &repo);
        let e = &n.policy;
        assert!(!e.command_allowed("curl"));
        assert!(!e.program_path_allowed("evil.sh"));
        assert!(!e.command_auto_approved("curl"));
        assert!(e.command_allowed("git"));
        assert_eq!(e.sandbox, SandboxMode::Landlock);
        assert_eq!(e.network.allow, vec!["api.example.org".to_string()]);
        assert_eq!(e.env_passthrough, vec!["CI".to_string()]);
        assert_eq!(e.limits.memory_mb, 512);
        assert_eq!(e.limits.timeout_s, 60);
        assert_eq!(e.read_paths, vec![PathBuf::from("/usr/share")]);
        assert!(e.creates.is_empty());
        assert_eq!(e.jobs, None);
        let ignored = n.ignored.join("\n");
        for needle in [
            "commands \"curl\"",
            "commands \"./evil.sh\"",
            "auto_approve_commands \"curl\"",
            "sandbox \"none\": weaker than the approved \"landlock\"",
            "network.allow \"evil.example.net\"",
            "network.allow \"*.example.org:8443\"",
            "env_passthrough \"AWS_SECRET_ACCESS_KEY\"",
            "limits.memory_mb 0",
            "limits.timeout_s 3600",
            "read_paths \"/home\"",
            "jobs 8",
            "creates \"x\"",
        ] {
            assert!(ignored.contains(needle), "{needle} not in\n{ignored}");
        }
    }

    #[test]
    fn a_repository_narrows_what_it_names() {
        let approved = p(
            r#"{"allow_commands": ["rg", ".venv/bin/*"], "sandbox": "auto",
            "network": {"allow": ["*.example.org", "registry:npm", "10.0.0.1:8080"]},
            "env_passthrough": ["CI", "NPM_TOKEN"], "confirm_tools": [],
            "limits": {"cpu_s": 30, "open_files": 0}, "jobs": 8}"#,
        );
        let repo = p(
            r#"{"commands": ["git"], "allow_commands": [".venv/bin/python"],
            "sandbox": "bwrap", "network": {"allow": ["api.example.org:443", "registry:npm"]},
            "env_passthrough": ["CI"], "confirm_tools": ["file_write"],
            "limits": {"cpu_s": 10, "open_files": 64}, "jobs": 2}"#,
        );
        let n = narrow(&approved, &repo);
        let e = &n.policy;
        assert!(e.command_allowed("git"));
        assert!(
            !e.command_allowed("cargo"),
            "the repository's commands replace the default"
        );
        assert!(!e.command_allowed("rg"));
        assert!(e.program_path_allowed(".venv/bin/python"));
        assert!(!e.program_path_allowed(".venv/bin/pip"));
        assert_eq!(e.sandbox, SandboxMode::Bwrap);
        assert_eq!(e.network.allow, vec!["api.example.org:443", "registry:npm"]);
        assert_eq!(e.env_passthrough, vec!["CI"]);
        assert!(e.tool_needs_confirmation("file_write"));
        assert_eq!(e.limits.cpu_s, Some(10));
        assert_eq!(e.limits.open_files, 64);
        assert_eq!(e.jobs, Some(2));
        assert!(n.ignored.is_empty(), "{:?}", n.ignored);
        let narrowed = n.narrowed.join("\n");
        for needle in [
            "commands \"rg\"",
            "network.allow \"10.0.0.1:8080\"",
            "sandbox \"bwrap\"",
            "NPM_TOKEN",
        ] {
            assert!(narrowed.contains(needle), "{needle} not in\n{narrowed}");
        }
    }

    #[test]
    fn host_patterns_meet_exactly() {
        let meet = |a: &str, r: &str| {
            let mut notes = Notes::default();
            network(
                &NetworkPolicy {
                    allow: vec![a.into()],
                },
                &NetworkPolicy {
                    allow: vec![r.into()],
                },
                &mut notes,
            )
            .allow
        };
        assert_eq!(
            meet("*.example.org", "a.example.org"),
            vec!["a.example.org"]
        );
        assert_eq!(
            meet("a.example.org", "*.example.org"),
            vec!["a.example.org"]
        );
        assert!(
            meet("example.org", "*.example.org").is_empty(),
            "*. is subdomains only"
        );
        assert_eq!(
            meet("*.example.org", "*.b.example.org"),
            vec!["*.b.example.org"]
        );
        assert_eq!(
            meet("*.b.example.org", "*.example.org"),
            vec!["*.b.example.org"]
        );
        assert!(meet("*.example.org", "*.example.net").is_empty());
        assert_eq!(
            meet("x.example.org", "x.example.org:443"),
            vec!["x.example.org:443"]
        );
        assert!(meet("x.example.org", "x.example.org:8443").is_empty());
        assert!(meet("x.example.org:22", "x.example.org:8443").is_empty());
        assert_eq!(meet("[::1]:8080", "[::1]:8080"), vec!["[::1]:8080"]);
        assert!(meet("registry:npm", "registry.npmjs.org").is_empty());
        assert!(meet("evil-example.org", "*.example.org").is_empty());
    }

    #[test]
    fn read_paths_are_compared_as_places() {
        let mut notes = Notes::default();
        let kept = read_paths(
            &[PathBuf::from("/usr")],
            &[
                PathBuf::from("/usr/../home"),
                PathBuf::from("/usr/share"),
                PathBuf::from("relative"),
            ],
            &mut notes,
        );
        assert_eq!(kept, vec![PathBuf::from("/usr/share")]);
        assert_eq!(notes.ignored.len(), 2, "{:?}", notes.ignored);
    }

    #[test]
    fn mcp_servers_narrow_to_the_tools_both_list() {
        let approved = p(
            r#"{"mcp": {"servers": {"t": {"command": ["srv"], "tools": ["a", "b"], "confirm": false},
                                      "u": {"command": ["u"], "tools": ["x"]}}}}"#,
        );
        let repo = p(
            r#"{"mcp": {"servers": {"t": {"command": ["other"], "tools": ["a", "c"], "confirm": ["a"]},
                                  "v": {"command": ["v"], "tools": ["y"]}}}}"#,
        );
        let n = narrow(&approved, &repo);
        let servers = &n.policy.mcp.servers;
        assert_eq!(servers.keys().collect::<Vec<_>>(), vec!["t"]);
        assert_eq!(
            servers["t"].command,
            vec!["srv"],
            "the approved declaration is used"
        );
        assert_eq!(servers["t"].tools, vec!["a"]);
        assert!(servers["t"].confirms("a"));
        let ignored = n.ignored.join("\n");
        assert!(ignored.contains("mcp.servers.v"), "{ignored}");
        assert!(ignored.contains("mcp.servers.t.tools \"c\""), "{ignored}");
        assert!(ignored.contains("declared otherwise"), "{ignored}");
    }
}
