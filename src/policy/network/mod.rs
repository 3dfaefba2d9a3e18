//! Network by name (SPEC §6, issue #21): a plan's commands reach exactly the hosts the policy's
//! `network.allow` names, through an HTTP/HTTPS proxy the runner starts for the run
//! ([`crate::net::proxy::Proxy`]); everything else is denied.
//!
//! This module holds the rules: the policy field, its entries (`host`, `*.host`, `host:port`,
//! `registry:cargo|npm|pypi`), the canonical form a host is compared in, and the record of one
//! request. The proxy itself is in [`crate::net::proxy`], the forwarder that carries connections out of a
//! bwrap network namespace in [`crate::net::forward`].
//!
//! How each mode keeps commands to the proxy: under bwrap the network namespace stays unshared and
//! only a forwarder inside it reaches the proxy, through a UNIX socket bound into the sandbox;
//! under Landlock a command may open TCP connections only to the proxy's port, and a seccomp
//! filter ([`crate::process::seccomp`]) refuses UDP and raw sockets whatever the policy says.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The policy's `network` field: which hosts commands may reach. Empty (the default): none, and no
/// proxy is started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkPolicy {
    /// Host names (`registry.example.org`), subdomain wildcards (`*.cdn.example.org`), either with
    /// a port (`host:8443`; without one, ports 80 and 443), IP literals, or `registry:cargo`,
    /// `registry:npm`, `registry:pypi` for the hosts that client is configured to use.
    pub allow: Vec<String>,
}

impl NetworkPolicy {
    /// Whether no host is allowed (then the network stays off and nothing is started).
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty()
    }

    /// Every entry parsed; the error names the entry (`network.allow[2] "x": why`).
    pub fn entries(&self) -> Result<Vec<Entry>, String> {
        self.allow
            .iter()
            .enumerate()
            .map(|(i, text)| {
                Entry::parse(text).map_err(|why| format!("network.allow[{i}] {text:?}: {why}"))
            })
            .collect()
    }
}

/// One `network.allow` entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A host pattern, allowed as written.
    Host(HostRule),
    /// `registry:NAME`: the hosts a package client is configured to use, found at run start.
    Registry(Registry),
}

impl Entry {
    /// Parses one entry (see [`NetworkPolicy::allow`]).
    pub fn parse(text: &str) -> Result<Entry, String> {
        if let Some(name) = text.strip_prefix("registry:") {
            return Registry::parse(name).map(Entry::Registry);
        }
        HostRule::parse(text, text).map(Entry::Host)
    }
}

/// What a host rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// This host name exactly (canonical form).
    Name(String),
    /// Any subdomain of this name (`*.example.org` matches `a.example.org`, not `example.org`).
    Subdomains(String),
    /// This IP address, written literally.
    Ip(IpAddr),
}

/// One allowed host pattern with its port, and the policy line it came from (named in denials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// What it matches.
    pub pattern: Pattern,
    /// The port, or `None` for 80 and 443.
    pub port: Option<u16>,
    /// The `network.allow` entry it came from, as written.
    pub source: String,
}

/// Ports a rule without a port allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

impl HostRule {
    /// Parses `host`, `*.host`, `host:port`, an IPv4 literal or `[IPv6]:port`; `source` is the
    /// policy entry it belongs to.
    pub fn parse(text: &str, source: &str) -> Result<HostRule, String> {
        let (host, port) = split_host_port(text.trim())?;
        let (wildcard, host) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if host.contains('*') {
            return Err("a wildcard may only be a leading `*.`".to_string());
        }
        let pattern = match canonical_host(host)? {
            Host::Ip(ip) if !wildcard => Pattern::Ip(ip),
            Host::Ip(_) => return Err("`*.` cannot precede an IP address".to_string()),
            Host::Name(name) if wildcard => {
                if !name.contains('.') {
                    return Err(
                        "`*.` needs a domain with a dot after it (`*.example.org`)".to_string()
                    );
                }
                Pattern::Subdomains(name)
            }
            Host::Name(name) => Pattern::Name(name),
        };
        Ok(HostRule {
            pattern,
            port,
            source: source.to_string(),
        })
    }

    /// Whether a request for `host` (canonical) on `port` is allowed by this rule.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        };
        port_ok
            && match (&self.pattern, host) {
                (Pattern::Name(n), Host::Name(h)) => n == h,
                (Pattern::Subdomains(n), Host::Name(h)) => h
                    .strip_suffix(n.as_str())
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                (Pattern::Ip(a), Host::Ip(b)) => a == b,
                _ => false,
            }
    }
}

/// A host in the one form hosts are compared in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A name: ASCII, lower-case, IDNs as punycode (`xn--…`), no trailing dot.
    Name(String),
    /// An IP literal (never "the same" as any name).
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// The canonical form of `host` (see [`Host`]): one trailing dot removed, case folded, IDNs
/// converted to punycode with the IDNA rules (so a look-alike Unicode name is compared as the
/// distinct `xn--` name it is), IP literals (bracketed IPv6 too) parsed. Anything that is not a
/// plain DNS name — empty labels, characters a name cannot hold, numeric forms `inet_aton` would
/// read as an address (`127.1`, `0x7f.0.0.1`, `2130706433`) — is an error, so it can neither
/// match a rule nor be resolved to something else than it says.
pub fn canonical_host(host: &str) -> Result<Host, String> {
    let inner = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = inner.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    let trimmed = host.strip_suffix('.').unwrap_or(host);
    if trimmed.is_empty() {
        return Err("empty host".to_string());
    }
    let ascii = if trimmed.is_ascii() {
        trimmed.to_ascii_lowercase()
    } else {
        idna::domain_to_ascii(trimmed)
            .map_err(|_| "not a valid internationalised name".to_string())?
    };
    for label in ascii.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("a label of the name is empty or longer than 63 characters".to_string());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("{label:?} is not a DNS label"));
        }
    }
    // A last label of digits (or 0x…) would be read as an address by the resolver.
    let last = ascii.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit())
        || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err("a numeric address written as a name".to_string());
    }
    if ascii.len() > 253 {
        return Err("the name is longer than 253 characters".to_string());
    }
    Ok(Host::Name(ascii))
}

/// `host` and `port` of `host:port` (`[v6]:port`); no port → `None`.
pub fn split_host_port(text: &str) -> Result<(&str, Option<u16>), String> {
    // Digits only: `u16::from_str` also takes a leading `+`, which no URL parser reads as a port
    // (found by the `proxy` fuzz target, docs/fuzzing.md).
    let port = |p: &str| {
        Some(p)
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{p:?} is not a port number"))
    };
    if text.starts_with('[') {
        let end = text.find(']').ok_or("an unclosed `[`")?;
        let (host, rest) = text.split_at(end + 1);
        return match rest.strip_prefix(':') {
            Some(p) => Ok((host, Some(port(p)?))),
            None if rest.is_empty() => Ok((host, None)),
            None => Err("text after `]`".to_string()),
        };
    }
    match text.rsplit_once(':') {
        // More than one colon and no brackets: an IPv6 address without a port.
        Some((h, _)) if h.contains(':') => Ok((text, None)),
        Some((h, p)) => Ok((h, Some(port(p)?))),
        None => Ok((text, None)),
    }
}

/// The verdict on one request: the rule that allowed it, or why not.
pub fn decide<'r>(rules: &'r [HostRule], host: &Host, port: u16) -> Option<&'r HostRule> {
    rules.iter().find(|r| r.matches(host, port))
}

/// Where a remote MCP server listens (`mcp.servers.NAME.url`): its host in canonical form and its
/// port, for the same [`decide`] the proxy asks about a command's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as written.
    pub url: String,
    /// Whether it is `https://`.
    pub tls: bool,
    /// The host, canonical.
    pub host: Host,
    /// The port (443 or 80 when the URL names none).
    pub port: u16,
}

impl Endpoint {
    /// Parses an `https://` URL, or an `http://` one whose host is a loopback address (a bearer
    /// token must not cross a network in clear text); no user or password in it.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: ureq::http::Uri = url.parse().map_err(|e| format!("not a URL ({e})"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("needs https:// (or http:// on a loopback address)".to_string()),
        };
        let authority = uri.authority().ok_or("the URL names no host")?;
        if authority.as_str().contains('@') {
            return Err("a user or password in the URL is not taken (use headers)".to_string());
        }
        let host = canonical_host(authority.host())?;
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let loopback = match &host {
            Host::Ip(ip) => ip.is_loopback(),
            Host::Name(n) => n == "localhost",
        };
        if !tls && !loopback {
            return Err(format!(
                "http:// is taken only for a loopback address; {host} needs https://"
            ));
        }
        Ok(Endpoint {
            url: url.to_string(),
            tls,
            host,
            port,
        })
    }

    /// The `network.allow` entry that would allow it (what a refusal tells the user to add).
    pub fn allow_entry(&self) -> String {
        if DEFAULT_PORTS.contains(&self.port) {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One request a command made through the proxy, as recorded on its execution (table
/// `network_requests`), emitted as a `network_request` event and listed by `show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkRequest {
    /// `CONNECT` for a tunnel (TLS), else the HTTP method of a forwarded plain request.
    pub method: String,
    /// The host as the command asked for it (canonical when it could be read).
    pub host: String,
    /// The port.
    pub port: u16,
    /// Whether the proxy let it through.
    pub allowed: bool,
    /// The HTTP status the proxy answered with (200 for an opened tunnel, 403 denied, 502 when the
    /// host could not be reached, 400 for a malformed request).
    pub status: u16,
    /// Why it was denied, or which policy entry allowed it.
    pub reason: String,
    /// Bytes from the command to the host.
    pub bytes_up: u64,
    /// Bytes from the host to the command.
    pub bytes_down: u64,
    /// Unix ms when the request arrived.
    pub started_at: i64,
    /// Until the connection closed.
    pub duration_ms: u64,
}

/// A package client whose configured registry hosts an entry stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// cargo (crates).
    Cargo,
    /// npm (node packages).
    Npm,
    /// pip (Python packages).
    Pypi,
}

impl Registry {
    /// `cargo`, `npm` or `pypi` (also `pip`).
    pub fn parse(name: &str) -> Result<Registry, String> {
        match name {
            "cargo" => Ok(Registry::Cargo),
            "npm" => Ok(Registry::Npm),
            "pypi" | "pip" => Ok(Registry::Pypi),
            other => Err(format!(
                "unknown registry {other:?} (expected registry:cargo, registry:npm or registry:pypi)"
            )),
        }
    }

    /// The entry as written in a policy.
    pub fn entry(self) -> &'static str {
        match self {
            Registry::Cargo => "registry:cargo",
            Registry::Npm => "registry:npm",
            Registry::Pypi => "registry:pypi",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> HostRule {
        HostRule::parse(s, s).unwrap()
    }

    fn host(s: &str) -> Host {
        canonical_host(s).unwrap()
    }

    /// Found by the `proxy` fuzz target: `CONNECT 127.0.0.1:+PORT` was forwarded, where every URL
    /// parser refuses the port.
    #[test]
    fn a_port_is_digits_only() {
        for text in [
            "127.0.0.1:+80",
            "[::1]:+80",
            "example.org:+443",
            "example.org:-1",
            "h: 80",
        ] {
            assert!(split_host_port(text).is_err(), "{text}");
            assert!(HostRule::parse(text, text).is_err(), "{text}");
        }
        assert_eq!(
            split_host_port("example.org:080"),
            Ok(("example.org", Some(80)))
        );
        assert_eq!(split_host_port("[::1]:443"), Ok(("[::1]", Some(443))));
    }

    #[test]
    fn names_match_exactly_on_the_default_ports_only() {
        let r = rule("registry.example.org");
        assert!(r.matches(&host("registry.example.org"), 443));
        assert!(r.matches(&host("registry.example.org"), 80));
        assert!(!r.matches(&host("registry.example.org"), 8443));
        assert!(!r.matches(&host("evil.registry.example.org"), 443));
        assert!(!r.matches(&host("registry.example.org.evil.com"), 443));
        let r = rule("registry.example.org:8443");
        assert!(r.matches(&host("registry.example.org"), 8443));
        assert!(!r.matches(&host("registry.example.org"), 443));
    }

    #[test]
    fn case_and_one_trailing_dot_are_the_same_name() {
        let r = rule("Registry.Example.org");
        assert!(r.matches(&host("REGISTRY.example.ORG."), 443));
        assert!(canonical_host("registry.example.org..").is_err());
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let r = rule("*.cdn.example.org");
        assert!(r.matches(&host("a.cdn.example.org"), 443));
        assert!(r.matches(&host("a.b.cdn.example.org"), 443));
        assert!(!r.matches(&host("cdn.example.org"), 443));
        assert!(!r.matches(&host("xcdn.example.org"), 443));
        assert!(HostRule::parse("*.org", "x").is_err());
        assert!(HostRule::parse("a.*.org", "x").is_err());
    }

    #[test]
    fn ip_literals_never_match_names_and_numeric_tricks_are_refused() {
        let r = rule("registry.example.org");
        assert!(!r.matches(&host("127.0.0.1"), 443));
        assert!(!r.matches(&host("[::1]"), 443));
        for trick in ["127.1", "2130706433", "0x7f.0.0.1", "1.2.3.0x4"] {
            assert!(canonical_host(trick).is_err(), "{trick}");
        }
        let ip = rule("10.0.0.5:8080");
        assert!(ip.matches(&host("10.0.0.5"), 8080));
        let v6 = rule("[::1]:8080");
        assert!(v6.matches(&host("[::1]"), 8080));
    }

    #[test]
    fn idns_are_compared_as_punycode() {
        // A Cyrillic "е" makes a different name from the ASCII one.
        let r = rule("example.org");
        assert!(!r.matches(&host("ex\u{0430}mple.org"), 443));
        assert_eq!(
            host("b\u{fc}cher.example"),
            Host::Name("xn--bcher-kva.example".into())
        );
        let r = rule("b\u{fc}cher.example");
        assert!(r.matches(&host("xn--bcher-kva.example"), 443));
        assert!(canonical_host("a b.org").is_err());
        assert!(canonical_host("a/b.org").is_err());
    }

    #[test]
    fn remote_endpoints_need_tls_off_loopback_and_carry_no_credentials() {
        let e = Endpoint::parse("https://MCP.Example.com/mcp").unwrap();
        assert_eq!(
            (e.host.clone(), e.port, e.tls),
            (host("mcp.example.com"), 443, true)
        );
        assert_eq!(e.allow_entry(), "mcp.example.com");
        let e = Endpoint::parse("http://127.0.0.1:8123/mcp").unwrap();
        assert_eq!(e.allow_entry(), "127.0.0.1:8123");
        assert!(Endpoint::parse("http://localhost:9/mcp").is_ok());
        assert!(Endpoint::parse("http://[::1]:9/mcp").is_ok());
        for bad in [
            "http://mcp.example.com/mcp",
            "ftp://mcp.example.com/",
            "https://user:pw@mcp.example.com/mcp",
            "https://127.1/mcp",
            "mcp.example.com",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn entries_are_checked_with_their_place() {
        let p = NetworkPolicy {
            allow: vec!["ok.example.org".into(), "bad host".into()],
        };
        let err = p.entries().unwrap_err();
        assert!(err.starts_with("network.allow[1] \"bad host\""), "{err}");
        let p = NetworkPolicy {
            allow: vec!["registry:npm".into(), "registry:maven".into()],
        };
        assert!(p.entries().unwrap_err().contains("network.allow[1]"));
        assert!(HostRule::parse("host:0", "x").is_err());
        assert!(HostRule::parse("host:99999", "x").is_err());
    }
}
