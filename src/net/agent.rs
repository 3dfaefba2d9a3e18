//! The one HTTP client configuration the runner's own requests use (an LLM provider, a remote MCP
//! server): ureq over rustls, never a proxy from the environment, no redirects followed.
//!
//! `http_status_as_error(false)` so 4xx/5xx bodies and `Retry-After` can be read; no redirects (a
//! POST must not silently turn into something else, nor go to another host); no proxy from the
//! environment (a stray `HTTP_PROXY` must not reroute prompts or tokens); one global timeout
//! covering connect to last byte (a request may set a shorter one).
//!
//! TLS (`https://`) is rustls with the compiled-in Mozilla (webpki) roots, so a hosted endpoint is
//! verified the same way on every machine, whatever CA store the host (or a slim CI image) has.
//! Extra certificates are added to those roots and each is also *pinned*: a server presenting
//! exactly that certificate is accepted, so a self-signed server certificate (`openssl req
//! -x509`, which webpki refuses as an end entity) works when given explicitly (see
//! [`crate::net::pinned_tls`]).

use std::time::Duration;

use rustls::pki_types::CertificateDer;

/// Which certificates the agent trusts.
#[derive(Debug, Clone)]
pub enum Trust {
    /// The Mozilla roots only.
    WebPki,
    /// The Mozilla roots plus these certificates, which are also pinned. An empty list trusts
    /// nothing at all (a CA file that could not be loaded: fail closed).
    Extra(Vec<CertificateDer<'static>>),
}

/// An agent with `timeout` as its global bound and `trust` for TLS (see the module docs).
pub fn agent(timeout: Duration, trust: &Trust) -> ureq::Agent {
    use ureq::tls::{RootCerts, TlsConfig};
    let builder = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .max_redirects(0)
        .proxy(None);
    let extra = match trust {
        Trust::WebPki => {
            let agent_config = builder
                .tls_config(TlsConfig::builder().root_certs(RootCerts::WebPki).build())
                .build();
            return ureq::Agent::new_with_config(agent_config);
        }
        Trust::Extra(extra) => extra,
    };
    let tls = if extra.is_empty() {
        Err(rustls::Error::General("no certificate loaded".into()))
    } else {
        crate::net::pinned_tls::client_config(extra)
    };
    use ureq::unversioned::resolver::DefaultResolver;
    use ureq::unversioned::transport::{Connector, TcpConnector};
    match tls {
        Ok(tls) => ureq::Agent::with_parts(
            builder.build(),
            ().chain(TcpConnector::default())
                .chain(crate::net::pinned_tls::PinnedTlsConnector { config: tls }),
            DefaultResolver::default(),
        ),
        Err(_) => ureq::Agent::new_with_config(
            builder
                .tls_config(
                    TlsConfig::builder()
                        .root_certs(RootCerts::new_with_certs(&[]))
                        .build(),
                )
                .build(),
        ),
    }
}

/// A PEM file of certificates to trust besides the Mozilla roots (`--llm-ca-cert`, an MCP
/// server's `ca_cert`), read once: what it trusts and the SHA-256 of the bytes read, so the trust
/// that was checked against an approval is the trust used.
#[derive(Debug, Clone)]
pub struct CaFile {
    /// The certificates in it.
    pub certs: Vec<CertificateDer<'static>>,
    /// SHA-256 (hex) of the file's bytes.
    pub sha256: String,
}

impl CaFile {
    /// Reads `path`; an unreadable file, one that is not PEM, or one with no certificate in it
    /// is an error saying which.
    pub fn load(path: &std::path::Path) -> Result<CaFile, String> {
        let pem = crate::input::read_bounded(path, 1024 * 1024, "CA certificate file")
            .map_err(|e| e.to_string())?;
        let mut certs = Vec::new();
        for item in ureq::tls::parse_pem(&pem) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => {
                    certs.push(CertificateDer::from(c.der().to_vec()))
                }
                Ok(_) => {}
                Err(e) => return Err(format!("not a PEM file ({e})")),
            }
        }
        if certs.is_empty() {
            return Err("no PEM certificate in the file".to_string());
        }
        Ok(CaFile {
            certs,
            sha256: crate::util::sha256_hex(&pem),
        })
    }

    /// The agent's trust: the Mozilla roots and these certificates.
    pub fn trust(&self) -> Trust {
        Trust::Extra(self.certs.clone())
    }
}

/// `Retry-After` as delta-seconds (integer or decimal). The HTTP-date form is not parsed (local
/// servers do not send it); it yields `None` and the caller's own policy applies.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    // Anything beyond a day is nonsense; callers cap it far lower anyway.
    Duration::try_from_secs_f64(secs.min(86_400.0)).ok()
}
