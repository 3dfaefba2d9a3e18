//! The tool registry: name → tool. Plans, the executor, the LLM loop and `acode-run tools` all look
//! tools up here, so a tool that is not registered does not exist anywhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::Tool;

/// Every tool available to a run, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<&'static str, Registered>,
}

/// A tool and its argument schema, generated once when it is registered: every call and every
/// plan step is checked against it, and generating it is far from free.
#[derive(Clone)]
struct Registered {
    tool: Arc<dyn Tool>,
    schema: Arc<Value>,
}

impl ToolRegistry {
    /// An empty registry, for embedders who want to choose tools one by one.
    pub fn empty() -> Self {
        ToolRegistry::default()
    }

    /// The built-in tools.
    pub fn builtin() -> Self {
        let mut r = ToolRegistry::empty();
        super::agent::register(&mut r);
        super::files::register(&mut r);
        super::search::register(&mut r);
        super::command::register(&mut r);
        super::lsp::register(&mut r);
        super::history::register(&mut r);
        r
    }

    /// Adds or replaces a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let schema = Arc::new(tool.schema());
        self.tools.insert(tool.name(), Registered { tool, schema });
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|r| &r.tool)
    }

    /// Tool `name` with its argument schema (what [`Tool::schema`] returned at registration).
    pub fn lookup(&self, name: &str) -> Option<(&Arc<dyn Tool>, &Value)> {
        self.tools.get(name).map(|r| (&r.tool, &*r.schema))
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tools.keys().copied()
    }

    /// All tools, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values().map(|r| &r.tool)
    }

    /// Stops what tools keep running between calls (MCP servers): the end of a run. Returns the
    /// network requests made while stopping (see [`super::Tool::shutdown`]).
    pub fn shutdown(&self) -> Vec<crate::policy::network::NetworkRequest> {
        self.tools
            .values()
            .flat_map(|r| r.tool.shutdown())
            .collect()
    }

    /// `{name, description, parameters}` for each tool, as `acode-run tools` prints and LLMs see.
    pub fn describe(&self) -> Value {
        Value::Array(
            self.tools
                .values()
                .map(|Registered { tool: t, schema }| {
                    json!({
                        "name": t.name(),
                        "description": t.description(),
                        "idempotent": t.idempotent(),
                        "parameters": &**schema,
                    })
                })
                .collect(),
        )
    }
}
