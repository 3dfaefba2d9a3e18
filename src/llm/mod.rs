//! The LLM layer: a provider-neutral, blocking chat API that agentic steps drive (SPEC §7).
//!
//! The agent loop builds a [`ChatRequest`], calls [`LlmClient::chat`], records the exact
//! [`ChatResponse::request_body`] and [`ChatResponse::response_body`], retries an [`LlmError`] when
//! [`LlmError::is_retryable`] says so (using [`crate::executor::retry::Backoff`]), runs the returned
//! [`LlmToolCall`]s through the same validation as plan steps and feeds the results back as
//! [`Message::Tool`]. Everything a server sends is treated as hostile input: parsing is tolerant of
//! the many shapes local servers produce, but never trusts them (sizes are capped, ids invented,
//! malformed arguments surfaced as [`LlmToolCall::parse_error`] instead of being guessed at).
//!
//! Providers: [`openai`] (OpenAI-compatible `/chat/completions`, the default: Ollama, LM Studio,
//! llama.cpp server, vLLM), [`ollama`] (Ollama's native `/api/chat`) and [`anthropic`] (the
//! Anthropic Messages API `/v1/messages`, as served by llama.cpp, Ollama and LiteLLM). [`react`] is
//! a text protocol for models without native tool calling; `scripted` (only with the `testing`
//! feature, which the crate's own tests enable) is a replaying HTTP server so tests never need a
//! real model.

pub mod anthropic;
#[cfg(test)]
mod fixture_tests;

/// Requests shared by the providers' tests, so each provider is checked against the same input.
#[cfg(test)]
pub(crate) mod test_support {
    use serde_json::json;

    use super::{ChatRequest, Message, ToolSpec};

    /// Two tools, one with a real schema.
    pub fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "file_read".into(),
                description: "Read a file".into(),
                parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
            },
            ToolSpec {
                name: "file_edit".into(),
                description: "Edit a file".into(),
                parameters: json!({"type":"object"}),
            },
        ]
    }

    /// A miniature agent loop over `client`: asks the model to fix a bug, answers every tool call
    /// with "<tool> ok" until it gives a final answer. Returns the answer, the calls made in order
    /// and the total usage, for the fixture tests of every provider.
    pub fn fix_bug_conversation(
        client: &dyn super::LlmClient,
    ) -> (String, Vec<(String, serde_json::Value)>, super::Usage) {
        let mut messages = vec![
            Message::system("You fix bugs."),
            Message::user("Fix add() in src/lib.rs"),
        ];
        let mut usage = super::Usage::default();
        let mut executed = Vec::new();
        loop {
            let request = ChatRequest::new("", messages.clone()).with_tools(tools());
            let resp = client.chat(&request).unwrap();
            usage.add(resp.usage);
            messages.push(Message::assistant(&resp));
            if resp.tool_calls.is_empty() {
                return (resp.content.unwrap(), executed, usage);
            }
            for call in &resp.tool_calls {
                assert!(call.is_valid());
                executed.push((call.name.clone(), call.arguments.clone()));
                messages.push(Message::tool(&call.id, format!("{} ok", call.name)));
            }
        }
    }

    /// A system message, a user message and the tools above.
    pub fn request() -> ChatRequest {
        ChatRequest::new(
            "test-model",
            vec![Message::system("sys"), Message::user("read src/lib.rs")],
        )
        .with_tools(tools())
    }
}
pub mod http;
pub mod ollama;
pub mod openai;
#[doc(hidden)]
pub mod parse;
pub mod provider;
pub mod react;
pub mod replay;
/// Test-only: not in the shipped library (the `testing` feature, which the crate's own tests enable).
#[cfg(any(test, feature = "testing"))]
pub mod scripted;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

pub use react::ToolProtocol;

/// The default base URL: Ollama's OpenAI-compatible endpoint on this machine (SPEC §7).
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434/v1";

/// The base URL of the hosted Anthropic Messages API: the default of `--llm-provider anthropic`
/// when no URL is given (a local Messages server needs `--llm-url`).
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The default request timeout. Local models on a CPU can take minutes for one long answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The default cap on a response body, so a hostile or broken server cannot exhaust memory.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// How many characters of a server's error body are quoted in an error message.
const EXCERPT_CHARS: usize = 500;

/// A chat-capable LLM server. Blocking, because the executor is synchronous (SPEC §1: no async
/// runtime); `Send + Sync` so one client can serve a whole run.
pub trait LlmClient: Send + Sync {
    /// Sends one chat request and returns the model's answer, or a classified error.
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;

    /// `provider url model`, for progress lines and error messages; never contains the API key.
    fn describe(&self) -> String;

    /// The exact body [`LlmClient::chat`] would send for `request`, so the agent loop can record the
    /// prompt of an attempt that failed before any response arrived. The default is the
    /// provider-neutral JSON form of the request; the built-in providers return their wire body.
    fn request_body(&self, request: &ChatRequest) -> String {
        serde_json::to_string(request).unwrap_or_default()
    }

    /// The client that answers the requests of agent step `step_id`, when this client answers
    /// each step differently (a [`replay::ReplayClient`] answers from that step's recorded turns);
    /// `None`, the default, means this client serves every step.
    fn for_step(&self, step_id: &str) -> Option<std::sync::Arc<dyn LlmClient>> {
        let _ = step_id;
        None
    }
}

/// One call to the model: the conversation so far and the tools it may use.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatRequest {
    /// The model name as the server knows it (`qwen2.5-coder:7b`, ...).
    pub model: String,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools offered with native tool calling; empty for plain chat or the `react` protocol.
    pub tools: Vec<ToolSpec>,
    /// Sampling temperature; `None` leaves the server's default.
    pub temperature: Option<f32>,
    /// Upper bound on generated tokens; `None` leaves the server's default.
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    /// A request with no tools and server-default sampling, built up with the `with_*` methods.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        ChatRequest {
            model: model.into(),
            messages,
            tools: Vec::new(),
            temperature: None,
            max_tokens: None,
        }
    }

    /// Offers `tools` to the model (builder style).
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }
}

/// A tool as the model sees it: the same name, description and JSON schema as `acode-run tools`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The registered tool name.
    pub name: String,
    /// One sentence on what the tool does.
    pub description: String,
    /// The JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// The spec of a registered tool, so the schema shown to the model is the one that validates it.
    pub fn from_tool(tool: &dyn crate::tools::Tool) -> Self {
        ToolSpec {
            name: tool.name().to_string(),
            description: tool.description().to_string(),
            parameters: tool.schema(),
        }
    }

    /// The specs of the named tools in `registry`, in the order given; unknown names are skipped
    /// (the plan validator reports them long before a request is built).
    pub fn from_registry(registry: &crate::tools::ToolRegistry, names: &[&str]) -> Vec<Self> {
        names
            .iter()
            .filter_map(|name| registry.get(name))
            .map(|tool| ToolSpec::from_tool(tool.as_ref()))
            .collect()
    }
}

/// One message of the conversation, in provider-neutral form.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions: the step, the allowed tools, workspace facts.
    System {
        /// The text.
        content: String,
    },
    /// The user's turn (the instruction, verifier feedback, a `react` observation).
    User {
        /// The text.
        content: String,
    },
    /// What the model said before, replayed so it sees its own tool calls.
    Assistant {
        /// Its text, if any.
        content: Option<String>,
        /// Its tool calls, in order.
        tool_calls: Vec<LlmToolCall>,
    },
    /// The result of one tool call, matched to it by id.
    Tool {
        /// The [`LlmToolCall::id`] this answers.
        call_id: String,
        /// The (possibly truncated) result text.
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// The assistant message that replays `response` into the history.
    pub fn assistant(response: &ChatResponse) -> Self {
        Message::Assistant {
            content: response.content.clone(),
            tool_calls: response.tool_calls.clone(),
        }
    }

    /// A tool result for the call with id `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::Tool {
            call_id: call_id.into(),
            content: content.into(),
        }
    }
}

/// A tool call the model asked for. It is untrusted: the loop validates it like a plan step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlmToolCall {
    /// The server's id, or an invented `call_<n>` when it sent none (or a duplicate).
    pub id: String,
    /// The tool name as the model wrote it (may be empty or unknown: the loop reports that back).
    pub name: String,
    /// The arguments object. When [`LlmToolCall::parse_error`] is set this is NOT usable arguments:
    /// it holds what the model sent (the raw string when it was not valid JSON), so the loop can
    /// quote it back to the model and replay it unchanged in the history.
    pub arguments: Value,
    /// Why the call cannot be run as sent (arguments not JSON, not an object, no tool name). The loop
    /// must not execute such a call; it answers it with a [`Message::Tool`] carrying this text so
    /// the model can correct itself on the next turn.
    pub parse_error: Option<String>,
}

impl LlmToolCall {
    /// Whether the call is well-formed enough to validate and run.
    pub fn is_valid(&self) -> bool {
        self.parse_error.is_none()
    }

    /// The tool-result text to send back for a call that could not be parsed, or `None` if it
    /// parsed. Quotes the model's own (shortened) input so it can see its mistake.
    pub fn parse_error_feedback(&self) -> Option<String> {
        let error = self.parse_error.as_ref()?;
        let sent = match &self.arguments {
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        };
        Some(format!(
            "error: the call to '{}' was not run: {error}. You sent: {}. Call the tool again with a \
             JSON object as arguments.",
            self.name,
            excerpt(&sent, 300)
        ))
    }
}

/// The largest token count taken from one answer (2^40, about 10^12): a server reporting more is
/// believed up to here. Far above any real answer, far enough below `i64::MAX` that the database's
/// sums over millions of rows cannot overflow.
pub const MAX_COUNTED_TOKENS: u64 = 1 << 40;

/// Token counts reported by the server; zero when it reported none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
}

impl Usage {
    /// Prompt plus completion, for budgets.
    pub fn total(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// The counts as stored in the database (`INTEGER`, i.e. `i64`), saturating rather than wrapping.
    pub fn stored(&self) -> (i64, i64) {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        (clamp(self.prompt_tokens), clamp(self.completion_tokens))
    }

    /// Adds another call's usage (for per-step and per-run totals).
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
    }
}

/// The model's answer to one [`ChatRequest`], with everything the loop must record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatResponse {
    /// The text, `None` when the server sent none (or only whitespace).
    pub content: Option<String>,
    /// The tool calls, in the order the model made them.
    pub tool_calls: Vec<LlmToolCall>,
    /// `stop`, `tool_calls`, `length`, ... as sent; informative only (never relied on alone).
    pub finish_reason: Option<String>,
    /// Tokens used by this call.
    pub usage: Usage,
    /// Things to record but not fail on: truncation (`length`), invented ids, recovered calls.
    pub warnings: Vec<String>,
    /// The exact request body sent (never contains the API key: that travels in a header).
    pub request_body: String,
    /// The response body as received (capped at the configured maximum size).
    pub response_body: String,
}

/// Why a chat call failed. [`LlmError::is_retryable`] separates transient trouble from permanent.
///
/// Messages never contain the API key; server bodies are quoted only as short excerpts with the key
/// (if the server echoed it) replaced by `[REDACTED]`.
#[derive(Debug, Error)]
pub enum LlmError {
    /// The configuration cannot work (empty model, URL that is not `http://...`).
    #[error("LLM configuration: {0}")]
    Config(String),
    /// The TLS handshake with an `https://` server failed: most often a certificate that is not
    /// trusted (a private CA: `--llm-ca-cert`). Not retried: the next attempt fails the same way.
    #[error("TLS connection to {url} failed: {message}")]
    Tls {
        /// The URL that was called.
        url: String,
        /// What went wrong, with a hint when the certificate is not trusted.
        message: String,
    },
    /// Nothing listens at the URL (server not started, wrong port).
    #[error("connection refused by {url}: is the LLM server running? ({message})")]
    ConnectionRefused {
        /// The URL.
        url: String,
        /// The operating system's wording.
        message: String,
    },
    /// The server dropped the connection before answering completely.
    #[error("connection to {url} was reset or closed before a complete answer ({message})")]
    ConnectionReset {
        /// The URL.
        url: String,
        /// What was observed.
        message: String,
    },
    /// No complete answer within the request timeout.
    #[error("no answer from {url} within {} s (request timeout)", .after.as_secs_f64())]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// Any other transport failure (host not found, protocol error): not retried.
    #[error("cannot talk to {url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// The server rejected the credentials (401/403).
    #[error(
        "the LLM server at {url} refused the request with HTTP {status} (authentication); check \
         ACODE_LLM_API_KEY: {excerpt}"
    )]
    Auth {
        /// 401 or 403.
        status: u16,
        /// The URL.
        url: String,
        /// A short, redacted excerpt of the body.
        excerpt: String,
        /// The body as received (redacted), for the attempt record.
        body: String,
    },
    /// 404: the model is not known there (or the URL lacks the API path).
    #[error(
        "model '{model}' not found at {url} (HTTP 404: {excerpt}); check --model / ACODE_MODEL \
         (for Ollama: `ollama pull {model}`) and that --llm-url ends in /v1 for the openai and \
         anthropic providers"
    )]
    ModelNotFound {
        /// The model asked for.
        model: String,
        /// The URL.
        url: String,
        /// A short, redacted excerpt of the body.
        excerpt: String,
        /// The body as received (redacted), for the attempt record.
        body: String,
    },
    /// Any other non-2xx status.
    #[error("HTTP {status} from {url}: {excerpt}")]
    Status {
        /// The status code.
        status: u16,
        /// The URL.
        url: String,
        /// A short, redacted excerpt of the body.
        excerpt: String,
        /// The body as received (redacted), for the attempt record.
        body: String,
        /// The server's `Retry-After`, when it sent one in seconds.
        retry_after: Option<Duration>,
    },
    /// The body is larger than the configured cap.
    #[error("response from {url} is larger than the {limit}-byte limit; refusing to read it")]
    TooLarge {
        /// The URL.
        url: String,
        /// The cap in bytes.
        limit: usize,
    },
    /// A 2xx body that is not the expected shape.
    #[error("malformed response from {url}: {what}")]
    Malformed {
        /// The URL.
        url: String,
        /// What was wrong, naming the field.
        what: String,
        /// The body as received (redacted), for the attempt record.
        body: String,
    },
    /// A well-formed answer with neither text nor tool calls.
    #[error("empty answer from {url}: no content and no tool calls (finish_reason: {})",
        .finish_reason.as_deref().unwrap_or("none"))]
    EmptyAnswer {
        /// The URL.
        url: String,
        /// The finish reason sent, if any.
        finish_reason: Option<String>,
        /// The body as received (redacted), for the attempt record.
        body: String,
    },
    /// A replay ([`replay`]) was asked for a turn that differs from the recorded one (or that the
    /// recorded run never made): the step ends with `replay_diverged` (exit 37). Not retried.
    #[error("{message}")]
    ReplayDiverged {
        /// `step `fix`, turn 3: the tool result of `run_command` differs: ...`.
        message: String,
    },
    /// A replay reporting the error a recorded turn ended with (the server never answered it).
    #[error("{message} (as recorded; replayed)")]
    Recorded {
        /// The recorded error message.
        message: String,
    },
}

impl LlmError {
    /// Whether another attempt may succeed (SPEC §4.5): refused/reset connections, timeouts, and
    /// HTTP 408, 429, 500–599 (which includes 529 "overloaded"). Auth, 404, malformed and empty
    /// answers are permanent: retrying would only repeat them.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::ConnectionRefused { .. }
            | LlmError::ConnectionReset { .. }
            | LlmError::Timeout { .. } => true,
            LlmError::Status { status, .. } => is_retryable_status(*status),
            _ => false,
        }
    }

    /// The delay the server asked for with `Retry-After`, if any (the backoff caps it).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The HTTP status, for errors that got one.
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::Auth { status, .. } | LlmError::Status { status, .. } => Some(*status),
            LlmError::ModelNotFound { .. } => Some(404),
            _ => None,
        }
    }

    /// The response body received before the failure, so the loop can record the attempt.
    pub fn response_body(&self) -> Option<&str> {
        match self {
            LlmError::Auth { body, .. }
            | LlmError::ModelNotFound { body, .. }
            | LlmError::Status { body, .. }
            | LlmError::Malformed { body, .. }
            | LlmError::EmptyAnswer { body, .. } => Some(body),
            _ => None,
        }
    }
}

/// The statuses worth retrying: 408 Request Timeout, 429 Too Many Requests, 5xx (incl. 529).
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500..=599)
}

/// Which wire protocol a server speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI-compatible `POST {base}/chat/completions` (Ollama, LM Studio, llama.cpp, vLLM).
    #[default]
    #[serde(rename = "openai")]
    OpenAi,
    /// Ollama's native `POST {base}/api/chat`.
    Ollama,
    /// The Anthropic Messages API, `POST {base}/messages` (llama.cpp, Ollama, LiteLLM).
    Anthropic,
}

impl Provider {
    /// The name used on the command line and in `ACODE_LLM_PROVIDER`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Ollama => "ollama",
            Provider::Anthropic => "anthropic",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" | "openai-compatible" => Ok(Provider::OpenAi),
            "ollama" => Ok(Provider::Ollama),
            "anthropic" => Ok(Provider::Anthropic),
            other => Err(format!(
                "unknown LLM provider '{other}' (expected 'openai', 'ollama' or 'anthropic')"
            )),
        }
    }
}

/// How to reach the LLM server. Built from flags and the environment by the CLI, or by embedders.
#[derive(Clone, PartialEq)]
pub struct LlmConfig {
    /// Base URL without the endpoint path, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// The default model (a step's `model` argument overrides it, see [`LlmConfig::with_model`]).
    pub model: String,
    /// Sent as `Authorization: Bearer ...` (`x-api-key: ...` for the anthropic provider) when set;
    /// never printed, recorded or put in errors.
    pub api_key: Option<String>,
    /// Time limit for one whole request, connect to last byte.
    pub timeout: Duration,
    /// The wire protocol.
    pub provider: Provider,
    /// Responses larger than this are refused ([`LlmError::TooLarge`]).
    pub max_response_bytes: usize,
    /// A PEM file of extra CA certificates trusted for `https://` URLs besides the built-in
    /// (webpki, Mozilla) roots: `--llm-ca-cert`, `ACODE_LLM_CA_CERT`. For self-hosted endpoints
    /// behind a private CA.
    pub ca_cert: Option<std::path::PathBuf>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            base_url: DEFAULT_BASE_URL.to_string(),
            model: String::new(),
            api_key: None,
            timeout: DEFAULT_TIMEOUT,
            provider: Provider::OpenAi,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            ca_cert: None,
        }
    }
}

impl fmt::Debug for LlmConfig {
    // Manual so the API key can never leak through `{:?}` into logs, events or panics.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("timeout", &self.timeout)
            .field("provider", &self.provider)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

impl LlmConfig {
    /// A config for `base_url` and `model` with every other field at its default.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        LlmConfig {
            base_url: base_url.into(),
            model: model.into(),
            ..LlmConfig::default()
        }
    }

    /// Reads `ACODE_LLM_URL`, `ACODE_MODEL`, `ACODE_LLM_API_KEY`, `ACODE_LLM_CA_CERT`, and the
    /// optional `ACODE_LLM_PROVIDER` (`openai`|`ollama`|`anthropic`) and `ACODE_LLM_TIMEOUT_S`
    /// (seconds). Provider-specific defaults (the Anthropic URL, `ANTHROPIC_API_KEY`,
    /// `OPENAI_API_KEY`) are applied by [`LlmConfig::provider_defaults`] once flags have been
    /// applied too.
    /// Unset or empty variables keep the defaults; an unparsable provider or timeout is an error,
    /// not ignored.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`LlmConfig::from_env`] over any variable source, so it can be tested without touching the
    /// process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut config = LlmConfig::default();
        if let Some(url) = get("ACODE_LLM_URL") {
            config.base_url = url.trim().to_string();
        }
        if let Some(model) = get("ACODE_MODEL") {
            config.model = model.trim().to_string();
        }
        config.api_key = get("ACODE_LLM_API_KEY").map(|k| k.trim().to_string());
        config.ca_cert = get("ACODE_LLM_CA_CERT").map(|p| std::path::PathBuf::from(p.trim()));
        if let Some(provider) = get("ACODE_LLM_PROVIDER") {
            config.provider = provider
                .parse()
                .map_err(|e| LlmError::Config(format!("ACODE_LLM_PROVIDER: {e}")))?;
        }
        if let Some(secs) = get("ACODE_LLM_TIMEOUT_S") {
            let secs: f64 = secs.trim().parse().map_err(|_| {
                LlmError::Config(format!(
                    "ACODE_LLM_TIMEOUT_S must be a number of seconds, got '{secs}'"
                ))
            })?;
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return Err(LlmError::Config(
                    "ACODE_LLM_TIMEOUT_S must be between 0 and 86400 seconds".to_string(),
                ));
            }
            config.timeout = Duration::from_secs_f64(secs);
        }
        Ok(config)
    }

    /// Fills in what depends on the final provider and URL, after flags and environment are
    /// applied: `--llm-provider anthropic` without a URL (`url_given` false) talks to
    /// [`ANTHROPIC_BASE_URL`]; with no `ACODE_LLM_API_KEY`, the anthropic provider reads
    /// `ANTHROPIC_API_KEY`, and the openai provider reads `OPENAI_API_KEY` for a URL that is not
    /// on this machine (a local server never gets a hosted key sent to it by accident).
    pub fn provider_defaults(&mut self, url_given: bool, lookup: impl Fn(&str) -> Option<String>) {
        if !url_given && self.provider == Provider::Anthropic {
            self.base_url = ANTHROPIC_BASE_URL.to_string();
        }
        if self
            .api_key
            .as_deref()
            .is_some_and(|k| !k.trim().is_empty())
        {
            return;
        }
        let fallback = match self.provider {
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            Provider::OpenAi if !is_local_url(&self.base_url) => Some("OPENAI_API_KEY"),
            _ => None,
        };
        if let Some(name) = fallback {
            self.api_key = lookup(name)
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty());
        }
    }

    /// `provider url model` for a client speaking `provider`: what every built-in client's
    /// [`LlmClient::describe`] says; never the key.
    pub fn describe_as(&self, provider: Provider) -> String {
        format!(
            "{} {} model {}",
            provider.as_str(),
            self.base_url.trim_end_matches('/'),
            self.model
        )
    }

    /// A copy using `model` (a step's `model` override); an empty override keeps the default.
    pub fn with_model(&self, model: &str) -> Self {
        let mut copy = self.clone();
        if !model.trim().is_empty() {
            copy.model = model.trim().to_string();
        }
        copy
    }

    /// Checks what can be checked without a network call: an `http://` or `https://` URL, a
    /// model name, and a readable CA file when one is named.
    pub fn validate(&self) -> Result<(), LlmError> {
        let url = self.base_url.trim();
        let lower = url.to_ascii_lowercase();
        let scheme_len = if lower.starts_with("https://") {
            "https://".len()
        } else if lower.starts_with("http://") {
            "http://".len()
        } else {
            0
        };
        if scheme_len == 0 || url.len() <= scheme_len {
            return Err(LlmError::Config(format!(
                "LLM URL must look like http://HOST:PORT/v1 or https://HOST/v1, got '{url}' (set \
                 --llm-url or ACODE_LLM_URL)"
            )));
        }
        if let Some(path) = &self.ca_cert {
            http::load_ca_certs(path)?;
        }
        if self.model.trim().is_empty() {
            return Err(LlmError::Config(
                "no model given: set --model or ACODE_MODEL (e.g. qwen2.5-coder:7b)".to_string(),
            ));
        }
        Ok(())
    }
}

/// The client for `config.provider`. Infallible by design: configuration problems (an https URL,
/// no model) are reported by the first [`LlmClient::chat`] as non-retryable errors, so the CLI can
/// build a client before it knows whether any step is agentic.
pub fn client(config: LlmConfig) -> Box<dyn LlmClient> {
    match config.provider {
        Provider::OpenAi => Box::new(openai::client(config)),
        Provider::Ollama => Box::new(ollama::client(config)),
        Provider::Anthropic => Box::new(anthropic::client(config)),
    }
}

/// The first `max` characters of `text` on one line, with `...` when cut; for error messages.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let one_line: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max).collect();
        format!("{cut}...")
    }
}

/// Whether `url` points at this machine (`localhost`, `127.x`, `::1`): such a server is never
/// sent a hosted provider's key from `OPENAI_API_KEY`.
pub fn is_local_url(url: &str) -> bool {
    let rest = url.trim().split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    let host = host.to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Replaces the API key (servers sometimes echo keys; also in its JSON-escaped forms) and every
/// recognisable token format in a server's body or error by `[REDACTED]`, with the project's one
/// redactor: the body is kept in the record and quoted in errors.
pub(crate) fn redact(text: &str, secret: Option<&str>) -> String {
    let text = match secret {
        // Shorter than the redactor's minimum, but a key all the same.
        Some(s) if s.len() >= 4 && text.contains(s) => text.replace(s, "[REDACTED]"),
        _ => text.to_string(),
    };
    crate::redact::Redactor::new()
        .with_extra_values(secret)
        .redact_string(text)
}

/// The default excerpt length for server bodies in error messages.
pub(crate) fn body_excerpt(body: &str) -> String {
    if body.trim().is_empty() {
        "(empty body)".to_string()
    } else {
        excerpt(body, EXCERPT_CHARS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let mut c = LlmConfig::new("http://127.0.0.1:1/v1", "m");
        c.api_key = Some("sk-very-secret-123".into());
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-very-secret-123"), "{shown}");
        assert!(shown.contains("[REDACTED]"));
    }

    #[test]
    fn from_lookup_reads_variables_and_defaults() {
        let c = LlmConfig::from_lookup(|_| None).unwrap();
        assert_eq!(c.base_url, DEFAULT_BASE_URL);
        assert_eq!(c.api_key, None);
        assert_eq!(c.provider, Provider::OpenAi);

        let c = LlmConfig::from_lookup(|name| {
            match name {
                "ACODE_LLM_URL" => Some("http://127.0.0.1:8080/v1"),
                "ACODE_MODEL" => Some("qwen"),
                "ACODE_LLM_API_KEY" => Some("k123"),
                "ACODE_LLM_PROVIDER" => Some("ollama"),
                "ACODE_LLM_TIMEOUT_S" => Some("2.5"),
                _ => None,
            }
            .map(String::from)
        })
        .unwrap();
        assert_eq!(c.base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(c.model, "qwen");
        assert_eq!(c.api_key.as_deref(), Some("k123"));
        assert_eq!(c.provider, Provider::Ollama);
        assert_eq!(c.timeout, Duration::from_millis(2500));

        let empty_key =
            LlmConfig::from_lookup(|n| (n == "ACODE_LLM_API_KEY").then(|| "  ".to_string()))
                .unwrap();
        assert_eq!(empty_key.api_key, None);
        assert!(
            LlmConfig::from_lookup(|n| (n == "ACODE_LLM_TIMEOUT_S").then(|| "soon".to_string()))
                .is_err()
        );
        assert!(
            LlmConfig::from_lookup(|n| (n == "ACODE_LLM_PROVIDER").then(|| "x".to_string()))
                .is_err()
        );
        let anthropic = LlmConfig::from_lookup(|n| {
            (n == "ACODE_LLM_PROVIDER").then(|| "anthropic".to_string())
        })
        .unwrap();
        assert_eq!(anthropic.provider, Provider::Anthropic);
    }

    #[test]
    fn validate_accepts_https_and_rejects_missing_model() {
        assert!(
            LlmConfig::new("https://example.com/v1", "m")
                .validate()
                .is_ok()
        );
        let mut bad_ca = LlmConfig::new("https://example.com/v1", "m");
        bad_ca.ca_cert = Some("/nonexistent/ca.pem".into());
        let err = bad_ca.validate().unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
        assert!(matches!(
            LlmConfig::new("ftp://x", "m").validate(),
            Err(LlmError::Config(_))
        ));
        let no_model = LlmConfig::new(DEFAULT_BASE_URL, " ")
            .validate()
            .unwrap_err();
        assert!(no_model.to_string().contains("ACODE_MODEL"));
        assert!(!no_model.is_retryable());
        assert!(LlmConfig::new(DEFAULT_BASE_URL, "m").validate().is_ok());
    }

    #[test]
    fn with_model_overrides_only_when_given() {
        let c = LlmConfig::new(DEFAULT_BASE_URL, "a");
        assert_eq!(c.with_model("b").model, "b");
        assert_eq!(c.with_model("").model, "a");
    }

    #[test]
    fn retryable_statuses() {
        for s in [408, 429, 500, 502, 503, 504, 529, 599] {
            assert!(is_retryable_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 409, 422, 600] {
            assert!(!is_retryable_status(s), "{s}");
        }
    }

    #[test]
    fn provider_parses() {
        assert_eq!("OpenAI".parse::<Provider>(), Ok(Provider::OpenAi));
        assert_eq!("ollama".parse::<Provider>(), Ok(Provider::Ollama));
        assert_eq!(" Anthropic ".parse::<Provider>(), Ok(Provider::Anthropic));
        assert_eq!(Provider::Anthropic.to_string(), "anthropic");
        assert!("claude".parse::<Provider>().is_err());
    }

    #[test]
    fn parse_error_feedback_quotes_the_input() {
        let call = LlmToolCall {
            id: "call_1".into(),
            name: "file_read".into(),
            arguments: Value::String("{path: src".into()),
            parse_error: Some("arguments are not valid JSON".into()),
        };
        let fb = call.parse_error_feedback().unwrap();
        assert!(
            fb.contains("file_read") && fb.contains("{path: src"),
            "{fb}"
        );
        assert!(!call.is_valid());
    }

    #[test]
    fn redact_and_excerpt() {
        assert_eq!(
            redact("key sk-1234 bad", Some("sk-1234")),
            "key [REDACTED] bad"
        );
        assert_eq!(redact("abc", None), "abc");
        // A token right after an escaped newline in a JSON error body.
        let body = r#"{"error":"bad key:\nghp_16C7e42F292c6912E7710c838347Ae178B4a"}"#;
        assert!(
            !redact(body, None).contains("16C7e42F"),
            "{}",
            redact(body, None)
        );
        // The key as the server quoted it inside JSON.
        assert_eq!(
            redact(r#"{"k":"a\"b\\c-key"}"#, Some(r#"a"b\c-key"#)),
            r#"{"k":"[REDACTED]"}"#
        );
        assert_eq!(excerpt("a\nb", 10), "a b");
        assert_eq!(excerpt("abcdef", 3), "abc...");
    }

    #[test]
    fn provider_defaults_pick_the_hosted_url_and_keys() {
        let env = |name: &str| match name {
            "ANTHROPIC_API_KEY" => Some("sk-ant-test".to_string()),
            "OPENAI_API_KEY" => Some("sk-openai-test".to_string()),
            _ => None,
        };
        let mut c = LlmConfig {
            provider: Provider::Anthropic,
            ..LlmConfig::default()
        };
        c.provider_defaults(false, env);
        assert_eq!(c.base_url, ANTHROPIC_BASE_URL);
        assert_eq!(c.api_key.as_deref(), Some("sk-ant-test"));

        // A given URL is kept; ACODE_LLM_API_KEY wins over the provider's variable.
        let mut c = LlmConfig::new("http://127.0.0.1:8080/v1", "m");
        c.provider = Provider::Anthropic;
        c.api_key = Some("explicit".into());
        c.provider_defaults(true, env);
        assert_eq!(c.base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(c.api_key.as_deref(), Some("explicit"));

        // OPENAI_API_KEY only for a URL off this machine.
        let mut c = LlmConfig::new("http://localhost:11434/v1", "m");
        c.provider_defaults(true, env);
        assert_eq!(c.api_key, None);
        let mut c = LlmConfig::new("https://api.openai.com/v1", "m");
        c.provider_defaults(true, env);
        assert_eq!(c.api_key.as_deref(), Some("sk-openai-test"));
        let mut c = LlmConfig::new("https://example.com/v1", "m");
        c.provider = Provider::Ollama;
        c.provider_defaults(true, env);
        assert_eq!(c.api_key, None);
    }

    #[test]
    fn local_urls() {
        for url in [
            "http://127.0.0.1:11434/v1",
            "http://localhost/v1",
            "http://[::1]:8080/v1",
            "http://user@127.0.0.2:1",
        ] {
            assert!(is_local_url(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "http://10.0.0.1/v1",
            "http://127.0.0.1.evil.com/v1",
            "http://localhost@evil.com/v1",
        ] {
            assert!(!is_local_url(url), "{url}");
        }
    }
}
