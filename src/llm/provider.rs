//! The one client shell the three HTTP providers share: a connection pool, the id source for
//! invented tool-call ids, the model chosen for a request, the exchange ([`super::http`]) and the
//! [`LlmClient`] methods. A provider differs only in its wire mapping ([`Wire`]): where it posts,
//! how it sends the key, the request body it builds and how it reads the answer.

use std::marker::PhantomData;
use std::sync::atomic::AtomicU64;

use serde_json::{Map, Value};

use super::http::{self, KeyHeader};
use super::parse::IdAllocator;
use super::{ChatRequest, ChatResponse, LlmClient, LlmConfig, LlmError, LlmToolCall, Provider};

/// One provider's wire mapping: everything in which the providers differ.
pub trait Wire {
    /// The provider, as `describe` names it.
    const PROVIDER: Provider;
    /// How the API key is sent.
    const KEY_HEADER: KeyHeader;
    /// Fixed headers sent with every request (Anthropic's API version).
    const HEADERS: &'static [(&'static str, &'static str)] = &[];

    /// The endpoint called, from the configured base URL.
    fn endpoint(base_url: &str) -> String;

    /// The body posted for `request` with `model`.
    fn request_json(request: &ChatRequest, model: &str) -> Value;

    /// The answer read from a 2xx `body` (hostile input), ids invented from `ids`.
    fn parse_response(
        body: &str,
        url: &str,
        request: &ChatRequest,
        ids: &mut IdAllocator,
    ) -> Result<ChatResponse, LlmError>;
}

/// A client for one server speaking wire `W`. Cheap to share: holds a connection pool.
pub struct HttpClient<W> {
    config: LlmConfig,
    agent: ureq::Agent,
    /// Source of invented tool-call ids, so they stay unique across the turns of a conversation.
    next_id: AtomicU64,
    wire: PhantomData<fn() -> W>,
}

impl<W: Wire> HttpClient<W> {
    /// A client for `config` (the provider field is not consulted).
    pub fn new(config: LlmConfig) -> Self {
        let agent = http::agent(&config);
        HttpClient {
            config,
            agent,
            next_id: AtomicU64::new(0),
            wire: PhantomData,
        }
    }

    /// The endpoint called.
    pub fn endpoint(&self) -> String {
        W::endpoint(&self.config.base_url)
    }
}

impl<W: Wire> LlmClient for HttpClient<W> {
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let model = effective_model(request, &self.config)?;
        let url = self.endpoint();
        let request_body = W::request_json(request, &model).to_string();
        let mut ids = IdAllocator::new(&self.next_id);
        http::exchange(
            &self.agent,
            &self.config,
            &url,
            &model,
            request_body,
            W::KEY_HEADER,
            W::HEADERS,
            |body| W::parse_response(body, &url, request, &mut ids),
        )
    }

    fn describe(&self) -> String {
        self.config.describe_as(W::PROVIDER)
    }

    fn request_body(&self, request: &ChatRequest) -> String {
        let model = self.config.with_model(&request.model).model;
        W::request_json(request, &model).to_string()
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
