//! The options that shape a run beyond its plan and policy — how confirmations are answered, the
//! OS sandbox asked for, the LLM it talks to — recorded on the run when it starts, so that
//! `resume` continues the run *as it was started* (SPEC §9, issue #21) instead of with whatever
//! the resuming command line happens to say.
//!
//! Keys are never part of it. The rule for `resume`: a setting not given is taken from the record;
//! a setting given with the recorded value is fine; a setting given with another value is refused
//! ([`RunSettings::for_resume`]), naming the flag, the recorded value and the given one — except
//! where the LLM server is reached (`--llm-url`, `--llm-ca-cert`: [`MAY_CHANGE`]), which may
//! move between a run and its resumption (a local server restarted on another port) without
//! changing what the run asks of it. Output options (`--jsonl`, `--json`, `--junit`, `--quiet`, `--annotations`) are not settings: they
//! change how a run is shown, not what it does, and may differ on every invocation.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::executor::AgentSettings;
use crate::executor::callbacks::ConfirmMode;
use crate::llm::{LlmConfig, Provider, ToolProtocol};
use crate::policy::{Policy, SandboxMode};

/// Everything a run is started with that changes what it does (see the module docs). `None`
/// means "not given": the default applies to a new run, the record to a resumed one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSettings {
    /// How confirmations are answered (`--confirm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirm: Option<ConfirmMode>,
    /// The OS sandbox asked for (`--sandbox`); `None` is the policy's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxMode>,
    /// The LLM wire protocol (`--llm-provider`, `ACODE_LLM_PROVIDER`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_provider: Option<Provider>,
    /// The LLM server (`--llm-url`, `ACODE_LLM_URL`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_url: Option<String>,
    /// The default model (`--model`, `ACODE_MODEL`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Extra CA certificates for the LLM server (`--llm-ca-cert`, `ACODE_LLM_CA_CERT`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_ca_cert: Option<PathBuf>,
    /// Native tool calls or the react protocol (`--tool-protocol`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_protocol: Option<ToolProtocol>,
    /// Tokens the whole run may use (`--token-budget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Retries of transient LLM failures (`--llm-retries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_retries: Option<u32>,
    /// Most tool calls taken from one answer (`--max-calls-per-answer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_calls_per_answer: Option<usize>,
    /// A refused call fails the step (`--strict`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// Steps run at once (`--jobs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<usize>,
    /// Answer agent steps from this recorded run (its id) or replay file (its absolute path)
    /// instead of a model (`--replay`, docs/replay.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
    /// With `replay`: answer by turn order even where the requests differ (`--replay-lenient`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_lenient: Option<bool>,
}

/// The settings `resume` may change: where the LLM server is reached and how many steps run at
/// once — not what is asked of the model or of the sandbox.
pub const MAY_CHANGE: &[&str] = &["llm_url", "llm_ca_cert", "jobs"];

/// A setting given to `resume` that differs from the one the run was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingConflict {
    /// The flag, as typed (`--sandbox`).
    pub flag: String,
    /// What the run was started with (`not set` when it had none).
    pub recorded: String,
    /// What was given now.
    pub given: String,
}

impl fmt::Display for SettingConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: the run was started with {}",
            self.flag, self.given, self.recorded
        )
    }
}

/// A JSON value as a flag's value is typed: strings bare, `true` as "given".
fn shown(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "not set".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

impl RunSettings {
    /// The record of these settings (`runs.settings_json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }

    /// Reads a record: a run recorded before settings were kept (`None`) has none. A record
    /// that cannot be read (not JSON, a value of the wrong type, an unknown mode) is an error
    /// naming what is wrong, never "no settings": `resume` would otherwise continue the run
    /// without its recorded sandbox, budget or replay source, with whatever the command line says.
    pub fn from_json(text: Option<&str>) -> Result<RunSettings, serde_json::Error> {
        match text {
            None => Ok(RunSettings::default()),
            Some(t) => serde_json::from_str(t),
        }
    }

    /// The settings a resumed run continues with: `recorded`, with every setting `given` checked
    /// against it. `Err` lists each given setting that differs (see the module docs).
    pub fn for_resume(
        recorded: &RunSettings,
        given: &RunSettings,
    ) -> Result<RunSettings, Vec<SettingConflict>> {
        let as_map = |s: &RunSettings| match serde_json::to_value(s) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let (mut old, new) = (as_map(recorded), as_map(given));
        let conflicts: Vec<SettingConflict> = new
            .iter()
            .filter(|(k, v)| old.get(*k) != Some(*v) && !MAY_CHANGE.contains(&k.as_str()))
            .map(|(k, v)| SettingConflict {
                flag: format!("--{}", k.replace('_', "-")),
                recorded: shown(old.get(k)),
                given: shown(Some(v)),
            })
            .collect();
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
        for key in MAY_CHANGE {
            if let Some(v) = new.get(*key) {
                old.insert(key.to_string(), v.clone());
            }
        }
        Ok(serde_json::from_value(Value::Object(old)).unwrap_or_else(|_| recorded.clone()))
    }

    /// The LLM configuration and agent settings these settings give, over the environment's
    /// (`ACODE_LLM_URL`, `ACODE_MODEL`, ...) for anything not set; `api_key` is the runner's key,
    /// read once at start (never part of the settings). Also returns the settings with the LLM
    /// values actually used filled in, which is what a run records.
    pub fn llm(
        &self,
        api_key: Option<&str>,
        policy: &Policy,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(LlmConfig, AgentSettings, RunSettings), String> {
        let mut config = LlmConfig::from_lookup(&env).map_err(|e| e.to_string())?;
        config.api_key = api_key
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(String::from);
        if let Some(url) = &self.llm_url {
            config.base_url = url.clone();
        }
        if let Some(model) = &self.model {
            config.model = model.clone();
        }
        if let Some(provider) = self.llm_provider {
            config.provider = provider;
        }
        if let Some(ca) = &self.llm_ca_cert {
            config.ca_cert = Some(ca.clone());
        }
        let url_given =
            self.llm_url.is_some() || env("ACODE_LLM_URL").is_some_and(|u| !u.trim().is_empty());
        config.provider_defaults(url_given, &env);
        let agent = AgentSettings {
            model: config.model.clone(),
            protocol: self.tool_protocol.unwrap_or_default(),
            token_budget: self.token_budget,
            tool_result_chars: policy.limits.tool_result_chars,
            backoff: crate::executor::retry::Backoff::default()
                .with_retries(self.llm_retries.unwrap_or(3)),
            max_calls_per_answer: self
                .max_calls_per_answer
                .unwrap_or(crate::executor::agent::DEFAULT_MAX_CALLS_PER_ANSWER),
            strict: self.strict.unwrap_or(false),
            ..Default::default()
        };
        let used = RunSettings {
            llm_provider: Some(config.provider),
            llm_url: Some(config.base_url.clone()),
            model: Some(config.model.clone()).filter(|m| !m.is_empty()),
            llm_ca_cert: config.ca_cert.clone(),
            ..self.clone()
        };
        Ok((config, agent, used))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_takes_the_record_and_refuses_a_different_setting() {
        let recorded = RunSettings {
            confirm: Some(ConfirmMode::AutoApprove),
            sandbox: Some(SandboxMode::Landlock),
            model: Some("m1".into()),
            ..Default::default()
        };
        // Nothing given: the record.
        assert_eq!(
            RunSettings::for_resume(&recorded, &RunSettings::default()).unwrap(),
            recorded
        );
        // The same value given: fine.
        let same = RunSettings {
            sandbox: Some(SandboxMode::Landlock),
            ..Default::default()
        };
        assert_eq!(RunSettings::for_resume(&recorded, &same).unwrap(), recorded);
        // Where the server is may change.
        let moved = RunSettings {
            llm_url: Some("http://127.0.0.1:2/v1".into()),
            ..Default::default()
        };
        let resumed = RunSettings::for_resume(&recorded, &moved).unwrap();
        assert_eq!(resumed.llm_url.as_deref(), Some("http://127.0.0.1:2/v1"));
        assert_eq!(resumed.model.as_deref(), Some("m1"));
        // Another value, and a setting the run did not have: both named.
        let other = RunSettings {
            sandbox: Some(SandboxMode::None),
            token_budget: Some(5),
            ..Default::default()
        };
        let conflicts = RunSettings::for_resume(&recorded, &other).unwrap_err();
        let text: Vec<String> = conflicts.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            text,
            [
                "--sandbox none: the run was started with landlock",
                "--token-budget 5: the run was started with not set"
            ]
        );
    }

    #[test]
    fn the_record_round_trips_and_an_old_one_has_none() {
        let s = RunSettings {
            confirm: Some(ConfirmMode::Prompt),
            llm_provider: Some(Provider::Anthropic),
            tool_protocol: Some(ToolProtocol::React),
            strict: Some(true),
            ..Default::default()
        };
        assert_eq!(RunSettings::from_json(Some(&s.to_json())).unwrap(), s);
        assert_eq!(
            RunSettings::from_json(None).unwrap(),
            RunSettings::default()
        );
    }

    /// Found by the `store_rows` fuzz target's property "every failure is an error naming what
    /// is wrong": a record that could not be read was taken as "no settings", so `resume`
    /// continued a run without its recorded sandbox, budget or replay source.
    #[test]
    fn an_unreadable_record_is_an_error_naming_what_is_wrong() {
        for (record, says) in [
            ("not json", "expected"),
            (r#"{"sandbox":"nothing"}"#, "nothing"),
            (r#"{"token_budget":"lots"}"#, "lots"),
            (r#"{"replay":7}"#, "invalid type"),
            (r#"{"strict":"yes"}"#, "invalid type"),
        ] {
            let e = RunSettings::from_json(Some(record))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{record}: {e}");
        }
    }

    #[test]
    fn llm_values_used_are_recorded_without_the_key() {
        let env = |name: &str| match name {
            "ACODE_LLM_URL" => Some("http://127.0.0.1:9/v1".to_string()),
            "ACODE_MODEL" => Some("env-model".to_string()),
            _ => None,
        };
        let given = RunSettings {
            model: Some("flag-model".into()),
            ..Default::default()
        };
        let (config, agent, used) = given
            .llm(Some("sk-secret"), &Policy::default(), env)
            .unwrap();
        assert_eq!(config.model, "flag-model");
        assert_eq!(agent.model, "flag-model");
        assert_eq!(used.llm_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert!(!used.to_json().contains("sk-secret"));
    }
}
