//! Credentials persisted in configuration files a command would otherwise see or be given (issue
//! #32, items 5 and 6): a token a checkout step left in the workspace's `.git/config`
//! (`http.<url>.extraheader = AUTHORIZATION: basic …`, or `https://user:TOKEN@host/…` in a remote
//! URL), and the userinfo of a registry mirror's URL found in a package client's configuration.
//!
//! One place decides what such a credential looks like and how a copy without it reads:
//! - [`strip_userinfo`]: a URL's `user:password@` (any scheme), or any userinfo of an `http(s)`
//!   URL (a token is often the user name alone, `https://TOKEN@host/`), removed;
//! - [`scan_git_config`]: a git configuration without its `extraheader` lines and with every URL's
//!   userinfo removed (values and `[url "…"]` section names alike), and the secret values that
//!   were there, for the run's redactor;
//! - [`sanitize_cargo_config`]: a cargo `config.toml` without `token` keys or URL userinfo.
//!
//! What each sandbox mode does with them: under bwrap commands see the sanitised copy of
//! `.git/config` mounted over it; under Landlock (which cannot show a copy at a path) the run
//! header and `preview` warn; in every mode the values are redacted from the database and every
//! output ([`learn_workspace_secrets`]).

use std::path::{Path, PathBuf};

use base64::Engine;

use crate::redact::Redactor;

/// Largest `.git/config` read (a real one is a few KiB); a larger one is scanned up to this.
const MAX_CONFIG: u64 = 1 << 20;

/// `text` with the userinfo of every URL in it removed, and the secrets that were there (the
/// userinfo, its password, or a user name that stands alone in an `http(s)` URL). A URL's userinfo
/// is removed when it holds a password (`scheme://user:pw@`), and for `http`/`https` whatever it
/// holds; `ssh://git@host/` keeps its user (a login name, not a secret).
pub fn strip_userinfo(text: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut secrets = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (before, after) = rest.split_at(i + 3);
        out.push_str(before);
        let scheme: String = before[..i]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<String>()
            .to_ascii_lowercase();
        let end = after
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '"' | '\'' | '\\' | ']' | '>') || c.is_whitespace()
            })
            .unwrap_or(after.len());
        let authority = &after[..end];
        let web = scheme.ends_with("http") || scheme.ends_with("https");
        match authority.rfind('@') {
            Some(at) if web || authority[..at].contains(':') => {
                let userinfo = &authority[..at];
                secrets.push(userinfo.to_string());
                if let Some((_, password)) = userinfo.split_once(':') {
                    secrets.push(password.to_string());
                }
                out.push_str(&authority[at + 1..]);
            }
            _ => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    secrets.retain(|s| !s.is_empty());
    (out, secrets)
}

/// What a git configuration holds that a command must not see (see [`scan_git_config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitConfigCredentials {
    /// The configuration without them: what commands under bwrap read instead.
    pub sanitized: String,
    /// The secret values (a header's value, its token, the decoded `user:password` of a Basic
    /// token, a URL's userinfo and password), for the run's redactor. Never shown.
    pub secrets: Vec<String>,
    /// Where they were, as git names keys (`http.https://host/.extraheader`, `remote.origin.url`),
    /// for the run header and `preview`. Holds no secret.
    pub keys: Vec<String>,
}

/// Scans a git configuration file's text for persisted credentials: `extraheader` keys (dropped
/// whole, with their continuation lines) and URL userinfo anywhere ([`strip_userinfo`]). `None`
/// when there is none, so the text is shown as it is.
pub fn scan_git_config(text: &str) -> Option<GitConfigCredentials> {
    let mut sanitized = String::with_capacity(text.len());
    let mut secrets: Vec<String> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    let mut section = String::new();
    let mut dropping = false;
    for line in text.split_inclusive('\n') {
        if dropping {
            // A dropped value continued on this line (`\` at the end of the previous one).
            secrets.push(line.trim().trim_end_matches('\\').to_string());
            dropping = continues(line);
            continue;
        }
        let trimmed = line.trim_start();
        let (header, body) = match trimmed.strip_prefix('[').and_then(|h| h.split_once(']')) {
            Some((h, rest)) => (Some(h), rest),
            None => (None, line),
        };
        if let Some(h) = header {
            let (clean, found) = strip_userinfo(h);
            if !found.is_empty() {
                keys.push(format!(
                    "[{}] (a URL with credentials)",
                    section_name(&clean)
                ));
                secrets.extend(found);
            }
            section = section_name(&clean);
            sanitized.push('[');
            sanitized.push_str(&clean);
            sanitized.push(']');
        }
        let key_part = body.trim_start();
        let is_comment = key_part.starts_with('#') || key_part.starts_with(';');
        let key = key_part
            .split(['=', '\n'])
            .next()
            .unwrap_or_default()
            .trim();
        if !is_comment && key.eq_ignore_ascii_case("extraheader") {
            let value = key_part.split_once('=').map_or("", |(_, v)| v);
            secrets.extend(header_secrets(value.trim().trim_end_matches('\\')));
            keys.push(format!("{section}.extraheader"));
            dropping = continues(line);
            if header.is_some() {
                sanitized.push('\n');
            }
            continue;
        }
        let (clean, found) = strip_userinfo(body);
        if !found.is_empty() {
            if !is_comment && !key.is_empty() {
                keys.push(format!("{section}.{key}"));
            } else {
                keys.push(format!("{section} (a URL with credentials in a comment)"));
            }
            secrets.extend(found);
        }
        sanitized.push_str(&clean);
    }
    if keys.is_empty() {
        return None;
    }
    secrets.retain(|s| !s.trim().is_empty());
    secrets.dedup();
    keys.dedup();
    Some(GitConfigCredentials {
        sanitized,
        secrets,
        keys,
    })
}

/// Whether a git configuration line continues on the next (`\` before the newline).
fn continues(line: &str) -> bool {
    line.trim_end_matches(['\n', '\r']).ends_with('\\')
}

/// `http "https://host/"` → `http.https://host/`, as git names the section's keys.
fn section_name(header: &str) -> String {
    let header = header.trim();
    match header.split_once(char::is_whitespace) {
        Some((name, sub)) => format!(
            "{}.{}",
            name.to_ascii_lowercase(),
            sub.trim().trim_matches('"')
        ),
        None => header.to_ascii_lowercase(),
    }
}

/// The secrets in an `extraheader` value: the value itself, a scheme's token
/// (`AUTHORIZATION: basic TOKEN`), and for Basic the decoded `user:password` and its password.
fn header_secrets(value: &str) -> Vec<String> {
    let value = value.trim_matches('"').trim();
    let mut out = vec![value.to_string()];
    let credentials = value.split_once(':').map_or(value, |(_, v)| v).trim();
    let mut words = credentials.split_whitespace();
    let (first, second) = (words.next(), words.next());
    let token = second.or(first).unwrap_or_default();
    out.push(token.to_string());
    if first.is_some_and(|s| s.eq_ignore_ascii_case("basic"))
        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(token)
        && let Ok(decoded) = String::from_utf8(bytes)
    {
        if let Some((_, password)) = decoded.split_once(':') {
            out.push(password.to_string());
        }
        out.push(decoded);
    }
    out
}

/// The workspace's own `.git/config` (when `.git` is a directory) and the credentials it holds,
/// or `None` when it holds none or cannot be read. Read at every call: cheap, and current.
pub fn workspace_git_config(root: &Path) -> Option<(PathBuf, GitConfigCredentials)> {
    let git = root.join(".git");
    if !std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    let path = git.join("config");
    read_git_config(&path).map(|c| (path, c))
}

/// The credentials in the git configuration file `path` (a regular file, read up to
/// [`MAX_CONFIG`] bytes without following a link), or `None`.
fn read_git_config(path: &Path) -> Option<GitConfigCredentials> {
    use std::io::Read;
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_CONFIG)
        .read_to_string(&mut text)
        .ok()?;
    scan_git_config(&text)
}

/// How many other git configurations [`learn_workspace_secrets`] reads at most.
const MAX_OTHER_CONFIGS: usize = 256;

/// The workspace's other git configurations: each nested repository's `.git/config` (at any
/// depth, found as [`crate::workspace::nested_git::walk`] finds `.git` entries) and each
/// submodule's under `.git/modules/`, at most [`MAX_OTHER_CONFIGS`].
fn other_git_configs(root: &Path) -> Vec<PathBuf> {
    let own = root.join(".git");
    let mut found: Vec<PathBuf> = crate::workspace::nested_git::walk(root)
        .into_iter()
        .filter(|git| *git != own && std::fs::symlink_metadata(git).is_ok_and(|m| m.is_dir()))
        .map(|git| git.join("config"))
        .collect();
    // Submodules keep their configuration in the superproject: .git/modules/NAME[/modules/…].
    let mut pending = vec![own.join("modules")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if found.len() >= MAX_OTHER_CONFIGS {
                return found;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                found.push(entry.path().join("config"));
                pending.push(entry.path().join("modules"));
            }
        }
    }
    found.truncate(MAX_OTHER_CONFIGS);
    found
}

/// Teaches `redactor` the credentials persisted in the workspace's git configurations — its own
/// `.git/config`, nested repositories' and submodules' — before anything a command prints is
/// recorded: a command can read them (under bwrap too, for the nested ones), and none of it may
/// reach the database, the events or the terminal.
pub fn learn_workspace_secrets(root: &Path, redactor: &Redactor) {
    if let Some((_, found)) = workspace_git_config(root) {
        redactor.add_values(found.secrets);
    }
    for path in other_git_configs(root) {
        if let Some(found) = read_git_config(&path) {
            redactor.add_values(found.secrets);
        }
    }
}

/// Teaches `redactor` the credentials in the URLs of the variables the policy passes to commands
/// (`env_passthrough`): `PIP_INDEX_URL=https://TOKEN@mirror/simple` is how a private index's
/// token reaches pip (docs/ci.md), and a user name standing alone in it matches no pattern.
pub fn learn_passed_credentials(names: &[String], redactor: &Redactor) {
    for name in names {
        if let Ok(value) = std::env::var(name) {
            redactor.add_values(strip_userinfo(&value).1);
        }
    }
}

/// The warning the run header and `preview` give when the workspace's `.git/config` holds
/// credentials (`keys` as [`GitConfigCredentials::keys`]) and `hidden` says whether commands see a
/// copy without them (bwrap) or the file itself (Landlock, none).
pub fn git_config_warning(keys: &[String], hidden: Option<bool>) -> String {
    let what = format!(
        "the workspace's .git/config holds a credential ({}), left by a checkout that persisted \
         its token",
        keys.join(", ")
    );
    let fix = "check out with `persist-credentials: false` (docs/ci.md)";
    match hidden {
        Some(true) => format!(
            "{what}: commands under bwrap read a copy without it; its value is redacted \
             everywhere; {fix}"
        ),
        Some(false) => format!(
            "{what}: commands CAN READ IT in this mode (only bwrap can show them a copy without \
             it); its value is redacted from records and output; {fix}"
        ),
        None => format!(
            "{what}: under bwrap commands read a copy without it, under Landlock or without a \
             sandbox they can read it; its value is redacted from records and output; {fix}"
        ),
    }
}

/// A cargo `config.toml` without credentials: `token` keys (`[registry]`, `[registries.NAME]`)
/// dropped and URL userinfo removed. Returns the text and the secrets that were in it.
pub fn sanitize_cargo_config(text: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut secrets = Vec::new();
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some((key, value)) = trimmed.split_once('=')
            && key.trim().trim_matches('"').eq_ignore_ascii_case("token")
        {
            let value = value.split('#').next().unwrap_or_default();
            secrets.push(value.trim().trim_matches(['"', '\'']).to_string());
            continue;
        }
        let (clean, found) = strip_userinfo(line);
        secrets.extend(found);
        out.push_str(&clean);
    }
    secrets.retain(|s| !s.is_empty());
    (out, secrets)
}

/// Credential files and directories a sandbox never shows, even inside a directory it shows (a
/// toolchain home, a program's installation, a `read_paths` entry): ssh and cloud keys, the
/// GitHub CLI's and docker's logins, `.netrc`, git's stored credentials, package registries'
/// tokens. Both the literal and the canonical form of each, so that a home reached through a
/// symlink is matched either way: `home` is the canonical one
/// ([`crate::policy::host::dirs::home`]), `HOME` as written is read here.
pub fn credential_paths(home: Option<PathBuf>) -> Vec<PathBuf> {
    const IN_HOME: &[&str] = &[
        ".ssh",
        ".aws",
        ".azure",
        ".config/gh",
        ".config/gcloud",
        ".config/hub",
        ".docker",
        ".gnupg",
        ".kube",
        ".netrc",
        ".git-credentials",
        ".config/git/credentials",
        ".npmrc",
        ".yarnrc",
        ".yarnrc.yml",
        ".pypirc",
        ".config/pip",
        ".pip",
        ".gem/credentials",
        ".m2/settings.xml",
        ".gradle/gradle.properties",
        ".cargo/credentials",
        ".cargo/credentials.toml",
    ];
    let mut out = Vec::new();
    let mut push = |p: PathBuf| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    let homes = [
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_absolute()),
        home,
    ];
    for h in homes.into_iter().flatten() {
        for rel in IN_HOME {
            push(h.join(rel));
        }
    }
    if let Some(cargo) = std::env::var_os("CARGO_HOME").map(PathBuf::from) {
        for c in [Some(cargo.clone()), cargo.canonicalize().ok()]
            .into_iter()
            .flatten()
        {
            push(c.join("credentials"));
            push(c.join("credentials.toml"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_leaves_urls_and_ssh_users_stay() {
        let (clean, secrets) =
            strip_userinfo("url = https://x-access-token:ghs_abcdef123456@git.example.org/o/r.git");
        assert_eq!(clean, "url = https://git.example.org/o/r.git");
        assert_eq!(
            secrets,
            ["x-access-token:ghs_abcdef123456", "ghs_abcdef123456"]
        );
        let (clean, secrets) = strip_userinfo("https://tokenonly123@h.example.org/x");
        assert_eq!(clean, "https://h.example.org/x");
        assert_eq!(secrets, ["tokenonly123"]);
        let (clean, secrets) = strip_userinfo("ssh://git@h.example.org/x and git@h:o/r");
        assert_eq!(clean, "ssh://git@h.example.org/x and git@h:o/r");
        assert!(secrets.is_empty());
        let (clean, secrets) = strip_userinfo("sparse+https://u:p4ssword@m.example.org:8443/i/");
        assert_eq!(clean, "sparse+https://m.example.org:8443/i/");
        assert_eq!(secrets, ["u:p4ssword", "p4ssword"]);
        assert_eq!(strip_userinfo("no url here").0, "no url here");
    }

    #[test]
    fn extraheaders_and_url_tokens_are_dropped_from_a_git_config() {
        let basic = base64::engine::general_purpose::STANDARD.encode("x-access-token:ghs_SeCrEt42");
        let text = format!(
            "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\turl = \
             https://x-access-token:ghs_UrLtOkEn9@git.example.org/o/r.git\n\tfetch = \
             +refs/heads/*:refs/remotes/origin/*\n[http \"https://git.example.org/\"]\n\t\
             extraheader = AUTHORIZATION: basic {basic}\n[url \"https://u:pw123456@m.example.org/\"]\n\t\
             insteadOf = https://git.example.org/\n[branch \"main\"]\n\tremote = origin\n"
        );
        let found = scan_git_config(&text).unwrap();
        for s in ["ghs_SeCrEt42", "ghs_UrLtOkEn9", "pw123456", basic.as_str()] {
            assert!(!found.sanitized.contains(s), "{s}: {}", found.sanitized);
            assert!(
                found.secrets.iter().any(|x| x == s),
                "{s}: {:?}",
                found.secrets
            );
        }
        assert!(
            found
                .sanitized
                .contains("url = https://git.example.org/o/r.git")
        );
        assert!(
            found
                .sanitized
                .contains("[http \"https://git.example.org/\"]\n[url")
        );
        assert!(found.sanitized.contains("[url \"https://m.example.org/\"]"));
        assert!(
            found
                .sanitized
                .contains("[branch \"main\"]\n\tremote = origin\n")
        );
        assert_eq!(
            found.keys,
            [
                "remote.origin.url",
                "http.https://git.example.org/.extraheader",
                "[url.https://m.example.org/] (a URL with credentials)"
            ]
        );
        // The keys name no secret.
        for k in &found.keys {
            assert!(!found.secrets.iter().any(|s| k.contains(s.as_str())), "{k}");
        }
    }

    #[test]
    fn a_continued_header_and_a_header_on_the_section_line_are_dropped_whole() {
        let text = "[http] extraheader = AUTHORIZATION: bearer \\\n  tok3nContinued\n[core]\n\tbare = false\n";
        let found = scan_git_config(text).unwrap();
        assert_eq!(found.sanitized, "[http]\n[core]\n\tbare = false\n");
        assert!(found.secrets.iter().any(|s| s == "tok3nContinued"));
        assert_eq!(found.keys, ["http.extraheader"]);
        assert_eq!(scan_git_config("[core]\n\tbare = false\n"), None);
    }

    #[test]
    fn a_cargo_config_loses_its_tokens_and_keeps_its_mirror() {
        let text = "[source.crates-io]\nreplace-with = \"m\"\n[source.m]\nregistry = \
                    \"sparse+https://u:pw9876543@m.example.org/index/\"\n[registries.m]\n\
                    token = \"cio_T0KEN\" # ours\n";
        let (clean, secrets) = sanitize_cargo_config(text);
        assert_eq!(
            clean,
            "[source.crates-io]\nreplace-with = \"m\"\n[source.m]\nregistry = \
             \"sparse+https://m.example.org/index/\"\n[registries.m]\n"
        );
        assert!(secrets.contains(&"cio_T0KEN".to_string()));
        assert!(secrets.contains(&"pw9876543".to_string()));
    }

    #[test]
    fn the_workspace_config_is_read_only_from_a_git_directory() {
        let dir = std::env::temp_dir().join(format!("acode-cfgsec-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(
            dir.join(".git/config"),
            "[remote \"o\"]\n\turl = https://a:zzsecret99@h.example.org/r\n",
        )
        .unwrap();
        let red = Redactor::new();
        learn_workspace_secrets(&dir, &red);
        assert_eq!(red.redact("x zzsecret99 y"), "x [REDACTED] y");
        let (path, found) = workspace_git_config(&dir).unwrap();
        assert_eq!(path, dir.join(".git/config"));
        assert_eq!(found.keys, ["remote.o.url"]);
        std::fs::remove_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert_eq!(workspace_git_config(&dir), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nested_repositories_and_submodules_teach_their_credentials_too() {
        let dir = std::env::temp_dir().join(format!("acode-cfgsec-{}", uuid::Uuid::new_v4()));
        for d in ["vendor/lib/.git", ".git/modules/sub/modules/inner"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::fs::write(
            dir.join("vendor/lib/.git/config"),
            "[http \"https://h.example.org/\"]\n\textraheader = AUTHORIZATION: bearer nestedTok42\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(".git/modules/sub/modules/inner/config"),
            "[remote \"o\"]\n\turl = https://u:innerPw77@h.example.org/r\n",
        )
        .unwrap();
        let red = Redactor::new();
        learn_workspace_secrets(&dir, &red);
        assert_eq!(red.redact("a nestedTok42 b"), "a [REDACTED] b");
        assert_eq!(red.redact("a innerPw77 b"), "a [REDACTED] b");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
