//! A TLS front for the plain HTTP servers the tests start, so the real binary speaks https to
//! them with a certificate the test generated.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use acode_run::llm::scripted::ScriptedServer;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// A TLS front for a plain HTTP test server (a scripted model, a scripted MCP server): one
/// request per connection, forwarded in plain text, the answer relayed. Serves connections until
/// dropped (the thread is detached; the test process ends it).
pub struct TlsFront {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its certificate, PEM: what a client must be told to trust.
    pub ca_pem: String,
}

/// The `HOST:PORT` of a scripted model server.
fn address(backend: &ScriptedServer) -> String {
    backend
        .url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

impl TlsFront {
    /// A front for `backend` with a fresh self-signed certificate for 127.0.0.1 and localhost.
    pub fn start(backend: &ScriptedServer) -> TlsFront {
        Self::start_to(&address(backend))
    }

    /// A front for the plain HTTP server at `backend_addr` (`127.0.0.1:PORT`) with a fresh
    /// self-signed certificate.
    pub fn start_to(backend_addr: &str) -> TlsFront {
        let certified = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])
        .unwrap();
        let ca_pem = certified.cert.pem();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        Self::serve_as(backend_addr, certified.cert.der().clone(), key, ca_pem)
    }

    /// A front for `backend` presenting `cert` (whose PEM is `pem`) with `key`.
    pub fn start_with(
        backend: &ScriptedServer,
        cert: rustls::pki_types::CertificateDer<'static>,
        key: PrivateKeyDer<'static>,
        ca_pem: String,
    ) -> TlsFront {
        Self::serve_as(&address(backend), cert, key, ca_pem)
    }

    fn serve_as(
        backend_addr: &str,
        cert: rustls::pki_types::CertificateDer<'static>,
        key: PrivateKeyDer<'static>,
        ca_pem: String,
    ) -> TlsFront {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let backend_addr = backend_addr.to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let config = Arc::clone(&config);
                let backend_addr = backend_addr.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, config, &backend_addr);
                });
            }
        });
        TlsFront { port, ca_pem }
    }

    /// `https://127.0.0.1:PORT/v1`, a model server's base URL.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/v1", self.port)
    }
}

/// One TLS connection: read one HTTP request, forward it in plain text, relay the answer.
fn serve(tcp: TcpStream, config: Arc<rustls::ServerConfig>, backend: &str) -> std::io::Result<()> {
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
    let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut request = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = tls.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&buf[..n]);
        if let Some(i) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while request.len() < head_end + length {
        let n = tls.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let mut plain = TcpStream::connect(backend)?;
    plain.write_all(&request)?;
    let mut answer = Vec::new();
    plain.read_to_end(&mut answer)?;
    tls.write_all(&answer)?;
    tls.conn.send_close_notify();
    tls.flush()?;
    Ok(())
}
