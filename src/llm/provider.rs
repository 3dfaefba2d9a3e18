//! The one client shell the three HTTP providers share: a connection pool, the id source for
//! invented tool-call ids, the model chosen for a request, the exchange ([`super::http`]) and the
//! [`LlmClient`] methods. A provider differs only in its wire mapping ([`Wire`]): where it posts,
//! how it sends the key, the request body it builds and how it reads the answer.

use std::sync::atomic::AtomicU64;

use serde_json::{Map, Value};

use super::http::{self, KeyHeader};
use super::parse::IdAllocator;
use super::{ChatRequest, ChatResponse, LlmClient, LlmConfig, LlmError, LlmToolCall, Provider};

/// One provider's wire mapping: everything in which the providers differ. Each provider
/// module defines one as a constant (`openai::WIRE`, …).
pub struct Wire {
    /// The provider, as `describe` names it.
    pub provider: Provider,
    /// How the API key is sent.
    pub key_header: KeyHeader,
    /// Fixed headers sent with every request (Anthropic's API version).
    pub headers: &'static [(&'static str, &'static str)],
    /// The endpoint called, from the configured base URL.
    pub endpoint: fn(&str) -> String,
    /// The body posted for a request with a model.
    pub request_json: fn(&ChatRequest, &str) -> Value,
    /// The answer read from a 2xx body (hostile input): body, URL, request, id source.
    pub parse_response:
        fn(&str, &str, &ChatRequest, &mut IdAllocator) -> Result<ChatResponse, LlmError>,
}

/// A client for one server speaking one [`Wire`]. Cheap to share: holds a connection pool.
pub struct HttpClient {
    wire: &'static Wire,
    config: LlmConfig,
    agent: ureq::Agent,
    /// Source of invented tool-call ids, so they stay unique across the turns of a conversation.
    next_id: AtomicU64,
}

impl HttpClient {
    /// A client speaking `wire` for `config` (the provider field is not consulted).
    pub fn new(wire: &'static Wire, config: LlmConfig) -> Self {
        let agent = http::agent(&config);
        HttpClient {
            wire,
            config,
            agent,
            next_id: AtomicU64::new(0),
        }
    }

    /// The endpoint called.
    pub fn endpoint(&self) -> String {
        (self.wire.endpoint)(&self.config.base_url)
    }
}

impl LlmClient for HttpClient {
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let model = effective_model(request, &self.config)?;
        let url = self.endpoint();
        let request_body = (self.wire.request_json)(request, &model).to_string();
        let mut ids = IdAllocator::new(&self.next_id);
        http::exchange(
            &self.agent,
            &self.config,
            &url,
            &model,
            request_body,
            self.wire.key_header,
            self.wire.headers,
            |body| (self.wire.parse_response)(body, &url, request, &mut ids),
        )
    }

    fn describe(&self) -> String {
        self.config.describe_as(self.wire.provider)
    }

    fn request_body(&self, request: &ChatRequest) -> String {
        let model = self.config.with_model(&request.model).model;
        (self.wire.request_json)(request, &model).to_string()
    }
}

/// The model to send: the request's, else the config's; checks the URL scheme on the way.
fn effective_model(request: &ChatRequest, config: &LlmConfig) -> Result<String, LlmError> {
    let model = if request.model.trim().is_empty() {
        config.model.trim()
    } else {
        request.model.trim()
    };
    config.with_model(model).validate()?;
    Ok(model.to_string())
}

/// An `f32` as the decimal a human wrote (`0.2`, not `0.20000000298023224`).
pub(crate) fn float(value: f32) -> Value {
    let rounded = (f64::from(value) * 1e6).round() / 1e6;
    serde_json::Number::from_f64(rounded)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// The wire arguments for replaying a call in the history. A call whose arguments did not parse is
/// replayed as `{}`: servers re-parse history (Ollama's compatibility layer rejects the whole request
/// when history arguments are not JSON), and the tool result already quotes what the model sent.
pub(crate) fn replay_arguments(call: &LlmToolCall) -> Value {
    if call.parse_error.is_some() || !call.arguments.is_object() {
        Value::Object(Map::new())
    } else {
        call.arguments.clone()
    }
}
