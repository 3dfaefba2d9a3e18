//! `registry:cargo`, `registry:npm`, `registry:pypi` in `network.allow`: the hosts a package
//! client is *configured* to use, read from that client's own configuration when a run starts —
//! so a policy, a doc or a test never names a registry's host, and a machine behind a mirror
//! allows its mirror.
//!
//! - **npm**: `npm config get registry`.
//! - **pypi**: pip's configured `index-url` and `extra-index-url` (`pip config list`, which also
//!   shows `PIP_INDEX_URL`), else pip's own default index and the host it serves files from, as
//!   pip reports them.
//! - **cargo**: the registry `crates-io` is replaced with in `$CARGO_HOME/config.toml`, else the
//!   registry indexes cargo has used (`$CARGO_HOME/registry/index/HOST-…`), with the download and
//!   API hosts each index's `config.json` names.
//!
//! The hosts found are shown in `preview` and the run header, and recorded on the run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::credentials::strip_userinfo;
use crate::policy::network::{HostRule, Registry};
use crate::process::helper::{how_it_failed, run_helper, runner_env};

impl Registry {
    /// The hosts the client is configured to use, as rules sourced from this entry, and the
    /// variables that give a sandboxed client the same configuration; an error says what could
    /// not be found (the run does not start: allowing nothing would fail later, less clearly).
    pub fn resolve(self) -> Result<Resolved, String> {
        let (urls, env) = match self {
            Registry::Npm => npm_config()?,
            Registry::Pypi => pip_config()?,
            Registry::Cargo => (
                cargo_urls(&cargo_home().ok_or("no CARGO_HOME and no HOME")?)?,
                Vec::new(),
            ),
        };
        let mut rules: Vec<HostRule> = Vec::new();
        for url in urls {
            let authority = authority_of(&url);
            let rule = HostRule::parse(authority, self.entry())
                .map_err(|e| format!("{}: {url:?} from its configuration: {e}", self.entry()))?;
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
        if rules.is_empty() {
            return Err(format!("{}: no registry host found", self.entry()));
        }
        Ok(Resolved { rules, env })
    }
}

/// What a `registry:` entry stands for on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The hosts allowed.
    pub rules: Vec<HostRule>,
    /// The client's registry configuration as variables for commands (`PIP_INDEX_URL`,
    /// `PIP_EXTRA_INDEX_URL`, `PIP_TRUSTED_HOST`, `PIP_CERT`, `npm_config_registry`), every URL's
    /// userinfo removed ([`strip_userinfo`]): inside the sandbox the client sees neither the
    /// runner's environment nor the user's configuration files, and would otherwise go to its
    /// public index. Credentials reach a command only through a variable the policy passes
    /// (`env_passthrough`). cargo needs none: its `config.toml` is copied into the run's
    /// `CARGO_HOME`, without credentials.
    pub env: Vec<(String, String)>,
}

/// `host[:port]` of a URL (`sparse+https://host:443/path` → `host:443`); a bare host is itself.
pub fn authority_of(url: &str) -> &str {
    let rest = url.trim();
    let rest = rest.strip_prefix("sparse+").unwrap_or(rest);
    let rest = match rest.find("://") {
        Some(i) => &rest[i + 3..],
        None => rest,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    // No credentials in a rule.
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

/// How long a client's configuration query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a client's configuration query (its own program, in the runner's environment and
/// directory, where a project's `.npmrc` or `pip.conf` counts) through [`run_helper`], and returns
/// its stdout; at most [`QUERY_TIMEOUT`].
fn query(program: &str, args: &[&str]) -> Result<String, String> {
    let what = format!("`{program} {}`", args.join(" "));
    let argv = std::iter::once(program)
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let out = run_helper(argv, &cwd, runner_env(), QUERY_TIMEOUT)
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.success() {
        Ok(out.stdout.text)
    } else {
        Err(format!(
            "{what} failed ({})",
            how_it_failed(&out, QUERY_TIMEOUT)
        ))
    }
}

type ClientConfig = (Vec<String>, Vec<(String, String)>);

fn npm_config() -> Result<ClientConfig, String> {
    let out = query("npm", &["config", "get", "registry"])?;
    let url = out.trim();
    if url.is_empty() || url == "undefined" {
        return Err("registry:npm: `npm config get registry` printed no registry".to_string());
    }
    let env = vec![("npm_config_registry".to_string(), strip_userinfo(url).0)];
    Ok((vec![url.to_string()], env))
}

/// pip's settings a sandboxed pip needs to use the configured index, with their variables.
const PIP_SETTINGS: &[(&str, &str)] = &[
    ("index-url", "PIP_INDEX_URL"),
    ("extra-index-url", "PIP_EXTRA_INDEX_URL"),
    ("trusted-host", "PIP_TRUSTED_HOST"),
    ("cert", "PIP_CERT"),
];

/// `pip config list`'s lines (`global.index-url='https://…'`) as `(key, value)`, values unquoted
/// and a list's escaped newlines turned into spaces.
fn pip_listed(listed: &str) -> Vec<(String, String)> {
    listed
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| {
            let v = v
                .trim()
                .trim_matches('\'')
                .trim_matches('"')
                .replace("\\n", " ");
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect()
}

/// The variables that give a sandboxed pip the settings in `listed` ([`PIP_SETTINGS`]), each as
/// pip itself would pick it for `pip install`: from its environment (`:env:`) first, then the
/// `install` section, then `global` (which already holds the user file over the site and system
/// ones); URLs without userinfo.
fn pip_env(listed: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for (name, var) in PIP_SETTINGS {
        let found = [":env:", "install", "global"].iter().find_map(|section| {
            let key = format!("{section}.{name}");
            listed.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
        });
        if let Some(value) = found {
            env.push((var.to_string(), strip_userinfo(value).0));
        }
    }
    env
}

fn pip_config() -> Result<ClientConfig, String> {
    let listed =
        pip_listed(&query("python3", &["-m", "pip", "config", "list"]).unwrap_or_default());
    let mut urls = Vec::new();
    for (key, value) in &listed {
        if key.ends_with(".index-url") || key.ends_with(".extra-index-url") {
            urls.extend(value.split_whitespace().map(String::from));
        }
    }
    let env = pip_env(&listed);
    if urls.is_empty() {
        // pip's own default, as pip reports it.
        let out = query(
            "python3",
            &[
                "-c",
                "from pip._internal.models.index import PyPI\nprint(PyPI.simple_url)\nprint(PyPI.file_storage_domain)",
            ],
        )?;
        urls.extend(
            out.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from),
        );
    }
    Ok((urls, env))
}

fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// The registry URLs cargo uses from `cargo_home` (see the module docs).
fn cargo_urls(cargo_home: &Path) -> Result<Vec<String>, String> {
    let mut urls = Vec::new();
    for name in ["config.toml", "config"] {
        if let Ok(text) = std::fs::read_to_string(cargo_home.join(name))
            && let Some(url) = replaced_crates_io(&text)
        {
            urls.push(url);
        }
    }
    let index = cargo_home.join("registry/index");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&index)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    let replaced = !urls.is_empty();
    for dir in dirs {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        // `HOST-HASH`: cargo names an index's cache after its host.
        let Some((host, _hash)) = name.rsplit_once('-') else {
            continue;
        };
        if replaced && !urls.iter().any(|u| authority_of(u).starts_with(host)) {
            continue;
        }
        if !replaced {
            urls.push(host.to_string());
        }
        if let Ok(text) = std::fs::read_to_string(dir.join("config.json"))
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
        {
            for key in ["dl", "api"] {
                if let Some(u) = v.get(key).and_then(|u| u.as_str()) {
                    urls.push(u.to_string());
                }
            }
        }
    }
    if urls.is_empty() {
        return Err(format!(
            "registry:cargo: cargo has not used a registry from {} yet (no registry/index) and \
             replaces none in its config.toml; name the hosts in network.allow",
            cargo_home.display()
        ));
    }
    Ok(urls)
}

/// In a cargo `config.toml`: the URL of the source `crates-io` is replaced with, if any. A small
/// reader for the two keys involved, not a TOML parser: `[source.crates-io] replace-with = "X"`
/// and `[source.X] registry = "URL"`.
fn replaced_crates_io(text: &str) -> Option<String> {
    let mut section = String::new();
    let mut keys: Vec<(String, String, String)> = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.trim().replace(['"', '\''], "");
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().trim_matches('"').trim_matches('\'').to_string();
            keys.push((section.clone(), k.trim().to_string(), v));
        }
    }
    let get = |section: &str, key: &str| {
        keys.iter()
            .find(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.clone())
    };
    let target = get("source.crates-io", "replace-with")?;
    get(&format!("source.{target}"), "registry")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_come_out_of_urls() {
        assert_eq!(
            authority_of("https://registry.example.org/"),
            "registry.example.org"
        );
        assert_eq!(
            authority_of("sparse+https://mirror.example.org:8443/index/"),
            "mirror.example.org:8443"
        );
        assert_eq!(
            authority_of("https://user:pw@pkgs.example.org/simple"),
            "pkgs.example.org"
        );
        assert_eq!(authority_of("files.example.org"), "files.example.org");
    }

    #[test]
    fn pip_settings_reach_commands_as_pip_picks_them_without_credentials() {
        let listed = pip_listed(
            ":env:.default-timeout='180'\n\
             global.index-url='https://u:s3cretpw@mirror.example.org/simple'\n\
             global.extra-index-url='https://a.example.org/s\\nhttps://b.example.org/s'\n\
             global.trusted-host='mirror.example.org'\n",
        );
        assert_eq!(
            pip_env(&listed),
            [
                (
                    "PIP_INDEX_URL".to_string(),
                    "https://mirror.example.org/simple".to_string()
                ),
                (
                    "PIP_EXTRA_INDEX_URL".to_string(),
                    "https://a.example.org/s https://b.example.org/s".to_string()
                ),
                (
                    "PIP_TRUSTED_HOST".to_string(),
                    "mirror.example.org".to_string()
                ),
            ]
        );
        // The environment beats the files, as in pip; nothing configured → nothing set.
        let listed = pip_listed(
            "global.index-url='https://file.example.org/simple'\n\
             :env:.index-url='https://env.example.org/simple'\n",
        );
        assert_eq!(
            pip_env(&listed),
            [(
                "PIP_INDEX_URL".to_string(),
                "https://env.example.org/simple".to_string()
            )]
        );
        assert!(pip_env(&pip_listed(":env:.default-timeout='180'\n")).is_empty());
    }

    #[test]
    fn a_replaced_crates_io_is_found_in_cargo_config() {
        let text = "[net]\nretry = 2\n\n[source.crates-io]\nreplace-with = \"mirror\" # ours\n\n\
                    [source.mirror]\nregistry = \"sparse+https://mirror.example.org/index/\"\n";
        assert_eq!(
            replaced_crates_io(text).as_deref(),
            Some("sparse+https://mirror.example.org/index/")
        );
        assert_eq!(replaced_crates_io("[source.crates-io]\n"), None);
    }

    #[test]
    fn cargo_indexes_name_their_hosts_and_config_json_the_download_hosts() {
        let home = std::env::temp_dir().join(format!("acode-cargo-home-{}", uuid::Uuid::new_v4()));
        let dir = home.join("registry/index/index.example.org-1949cf8c6b5b557f");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.json"),
            r#"{"dl": "https://static.example.org/crates", "api": "https://api.example.org"}"#,
        )
        .unwrap();
        let urls = cargo_urls(&home).unwrap();
        assert_eq!(
            urls,
            [
                "index.example.org",
                "https://static.example.org/crates",
                "https://api.example.org"
            ]
        );
        let empty = std::env::temp_dir().join(format!("acode-cargo-none-{}", uuid::Uuid::new_v4()));
        assert!(
            cargo_urls(&empty)
                .unwrap_err()
                .contains("has not used a registry")
        );
        let _ = std::fs::remove_dir_all(&home);
    }
}
