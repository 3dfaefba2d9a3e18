//! The one HTTP exchange every provider makes: POST a JSON body, read a capped reply, and turn
//! every way that can fail into a classified [`LlmError`]. Kept separate so the classification
//! (what is retryable, what the message says) is written once.

use std::io::Read;
use std::time::Duration;

use super::{ChatResponse, LlmConfig, LlmError, body_excerpt, redact};

/// A reply with any status; the caller decides what a non-2xx status means.
pub(crate) struct HttpReply {
    /// The status code.
    pub status: u16,
    /// `Retry-After` in seconds, when present and parsable.
    pub retry_after: Option<Duration>,
    /// The body, lossily decoded and with the API key redacted if the server echoed it.
    pub body: String,
}

/// A ureq agent for talking to one LLM server: [`crate::net::agent::agent`] with the
/// configured timeout and `config.ca_cert`'s certificates (a CA file that cannot be loaded leaves
/// the agent trusting nothing at all, fail closed; [`LlmConfig::validate`] reports the file first).
pub(crate) fn agent(config: &LlmConfig) -> ureq::Agent {
    use crate::net::agent::{Trust, agent};
    let trust = match &config.ca_cert {
        None => Trust::WebPki,
        Some(path) => load_ca_certs(path).map_or(Trust::Extra(Vec::new()), |ca| ca.trust()),
    };
    agent(config.timeout, &trust)
}

/// The certificates of a PEM file (`--llm-ca-cert`); an unreadable file, or one with no
/// certificate in it, is a configuration error naming the file.
pub(crate) fn load_ca_certs(path: &std::path::Path) -> Result<crate::net::agent::CaFile, LlmError> {
    crate::net::agent::CaFile::load(path).map_err(|why| {
        LlmError::Config(format!(
            "--llm-ca-cert / ACODE_LLM_CA_CERT {}: {why}",
            path.display()
        ))
    })
}

/// `base` joined with `path` (`/chat/completions`), tolerating a trailing slash on `base`.
pub(crate) fn join(base: &str, path: &str) -> String {
    format!("{}{}", base.trim().trim_end_matches('/'), path)
}

/// How a provider sends `ACODE_LLM_API_KEY`: the header differs between wire protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHeader {
    /// `Authorization: Bearer <key>` (OpenAI-compatible servers, Ollama).
    Bearer,
    /// `x-api-key: <key>` (the Anthropic Messages API).
    XApiKey,
}

/// POSTs `body` as JSON to `url` and reads the reply (any status) up to the configured size cap.
/// The key, if any, goes in the header `key_header` names; `extra` headers are fixed ones
/// (`anthropic-version`) and must not carry secrets: only the key is treated as one.
pub(crate) fn post_json_with(
    agent: &ureq::Agent,
    config: &LlmConfig,
    url: &str,
    body: &str,
    key_header: KeyHeader,
    extra: &[(&str, &str)],
) -> Result<HttpReply, LlmError> {
    let mut request = agent
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json");
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
        request = match key_header {
            KeyHeader::Bearer => request.header("Authorization", format!("Bearer {key}")),
            KeyHeader::XApiKey => request.header("x-api-key", key),
        };
    }
    let response = request
        .send(body)
        .map_err(|e| transport_error(e, url, config))?;
    let (parts, body) = response.into_parts();
    let status = parts.status.as_u16();
    let retry_after = parts
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);

    let limit = config.max_response_bytes;
    let mut bytes = Vec::new();
    body.into_reader()
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| transport_error(ureq::Error::from(e), url, config))?;
    if bytes.len() > limit {
        return Err(LlmError::TooLarge {
            url: url.to_string(),
            limit,
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    Ok(HttpReply {
        status,
        retry_after,
        body: redact(&text, config.api_key.as_deref()),
    })
}

/// The error for a reply whose status is not 2xx.
/// One request/answer exchange shared by every provider: POST the body, turn a non-2xx status into
/// a classified error, parse a 2xx body with the provider's `parse`, and attach both bodies to the
/// response for the record.
#[allow(clippy::too_many_arguments)]
pub(crate) fn exchange(
    agent: &ureq::Agent,
    config: &LlmConfig,
    url: &str,
    model: &str,
    request_body: String,
    key_header: KeyHeader,
    extra_headers: &[(&str, &str)],
    parse: impl FnOnce(&str) -> Result<ChatResponse, LlmError>,
) -> Result<ChatResponse, LlmError> {
    let reply = post_json_with(agent, config, url, &request_body, key_header, extra_headers)?;
    if !(200..300).contains(&reply.status) {
        return Err(status_error(reply, url, model));
    }
    let body = reply.body;
    let mut response = parse(&body)?;
    response.request_body = request_body;
    response.response_body = body;
    Ok(response)
}

pub(crate) fn status_error(reply: HttpReply, url: &str, model: &str) -> LlmError {
    let excerpt = body_excerpt(&reply.body);
    match reply.status {
        401 | 403 => LlmError::Auth {
            status: reply.status,
            url: url.to_string(),
            excerpt,
            body: reply.body,
        },
        404 => LlmError::ModelNotFound {
            model: model.to_string(),
            url: url.to_string(),
            excerpt,
            body: reply.body,
        },
        status => LlmError::Status {
            status,
            url: url.to_string(),
            excerpt,
            body: reply.body,
            retry_after: reply.retry_after,
        },
    }
}

pub(crate) use crate::net::agent::parse_retry_after;

/// Classifies a ureq failure. Refused and reset connections and timeouts are retryable; the rest
/// (host not found, protocol garbage, TLS) is not.
fn transport_error(error: ureq::Error, url: &str, config: &LlmConfig) -> LlmError {
    use std::io::ErrorKind as K;
    let url_s = url.to_string();
    let message = redact(&error.to_string(), config.api_key.as_deref());
    match error {
        ureq::Error::Timeout(_) => LlmError::Timeout {
            url: url_s,
            after: config.timeout,
        },
        ureq::Error::Io(io) => match io.kind() {
            K::ConnectionRefused => LlmError::ConnectionRefused {
                url: url_s,
                message,
            },
            K::ConnectionReset
            | K::ConnectionAborted
            | K::BrokenPipe
            | K::UnexpectedEof
            | K::NotConnected => LlmError::ConnectionReset {
                url: url_s,
                message,
            },
            K::TimedOut | K::WouldBlock => LlmError::Timeout {
                url: url_s,
                after: config.timeout,
            },
            // rustls reports handshake failures (an untrusted certificate) as `InvalidData` I/O
            // errors wrapping its own error.
            K::InvalidData if url.to_ascii_lowercase().starts_with("https://") => LlmError::Tls {
                url: url_s,
                message: tls_message(&io.to_string(), config.ca_cert.as_deref()),
            },
            _ => LlmError::Transport {
                url: url_s,
                message,
            },
        },
        ureq::Error::ConnectionFailed => LlmError::ConnectionRefused {
            url: url_s,
            message,
        },
        ureq::Error::BodyExceedsLimit(_) => LlmError::TooLarge {
            url: url_s,
            limit: config.max_response_bytes,
        },
        ureq::Error::Tls(_) | ureq::Error::TlsRequired | ureq::Error::Pem(_) => LlmError::Tls {
            url: url_s,
            message,
        },
        ureq::Error::Rustls(e) => LlmError::Tls {
            url: url_s,
            message: tls_message(&e.to_string(), config.ca_cert.as_deref()),
        },
        ureq::Error::BadUri(_) => LlmError::Config(format!("invalid LLM URL '{url}': {message}")),
        ureq::Error::HostNotFound => LlmError::Transport {
            url: url_s,
            message: "host not found (check --llm-url / ACODE_LLM_URL)".to_string(),
        },
        _ => LlmError::Transport {
            url: url_s,
            message,
        },
    }
}

/// A rustls failure explained: an untrusted certificate says how to trust a private CA — or,
/// when `--llm-ca-cert` was given, that the file given does not hold the right certificate
/// (never "pass the flag" to someone who passed it).
fn tls_message(rustls: &str, ca_cert: Option<&std::path::Path>) -> String {
    let untrusted = [
        "UnknownIssuer",
        "BadSignature",
        "NotValidForName",
        "Expired",
        "CaUsedAsEndEntity",
    ]
    .iter()
    .any(|k| rustls.contains(k))
        || rustls.contains("invalid peer certificate");
    match (untrusted, ca_cert) {
        (false, _) => rustls.to_string(),
        (true, None) => format!(
            "the server's certificate is not trusted ({rustls}); for a server with a private or \
             self-signed CA, pass the CA certificate with --llm-ca-cert FILE or ACODE_LLM_CA_CERT"
        ),
        (true, Some(file)) => format!(
            "the server's certificate is not trusted ({rustls}), although --llm-ca-cert / \
             ACODE_LLM_CA_CERT {} was given: that file must hold the certificate the server \
             presents (accepted exactly, self-signed or not) or the CA that issued it, valid for \
             the host name in the URL",
            file.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("1"), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 2.5 "),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(parse_retry_after("0"), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("NaN"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(
            parse_retry_after("1e300"),
            Some(Duration::from_secs(86_400))
        );
    }

    #[test]
    fn join_tolerates_trailing_slash() {
        assert_eq!(join("http://h/v1/", "/chat"), "http://h/v1/chat");
        assert_eq!(join("http://h/v1", "/chat"), "http://h/v1/chat");
    }
}
