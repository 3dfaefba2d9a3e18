//! Attestations of runs (issue 42, docs/attestations.md): what a run did, as an in-toto
//! Statement v1 in a DSSE envelope signed with a CI key, so a later job — a release, a deploy
//! gate, a reviewer — can check offline which files came out of which approved run, under which
//! sandbox and policy, without trusting the runner's database.
//!
//! The statement's subjects are the files the run created or changed, with their SHA-256 when it
//! ended (`workspace::changes`, recorded with the run); its predicate ([`PREDICATE_TYPE`], a
//! JSON Schema in `docs/attestation.schema.json`) is read from the record: the plan's hash, the
//! approval with its verified signers, the policy's hash, the sandbox and what it held, the
//! programs run, the MCP pins, every host asked for, a digest of the model traffic, each step's
//! outcome and the exit code. `acode-run verify` ([`verify`]) checks one.

pub mod dsse;
pub mod keys;
pub mod verify;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::plan::PlanAuthorization;
use crate::plan::signers::VerifiedSigner;
use crate::store::{HeaderPin, HostRequests, ModelTraffic, ProgramRun, Store, StoreError};

/// The DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// The in-toto Statement layer's type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// The predicate's type: acode-run's run record, version 1 (`docs/attestation.schema.json`).
pub const PREDICATE_TYPE: &str = "https://acode-run.dev/attestation/run/v1";

/// An in-toto Statement v1 about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// The files the run created or changed.
    pub subject: Vec<Subject>,
    /// [`PREDICATE_TYPE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// What the run was and did.
    pub predicate: RunPredicate,
}

/// One file the run created or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    /// Its path, relative to the workspace, `/`-separated.
    pub name: String,
    /// `{"sha256": HEX}`.
    pub digest: BTreeMap<String, String>,
}

/// The predicate: a run, from the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunPredicate {
    /// The run.
    pub run: RunFacts,
    /// The plan that ran.
    pub plan: PlanFacts,
    /// The approval it ran under.
    pub approval: ApprovalFacts,
    /// The policy it ran under.
    pub policy: PolicyFacts,
    /// The OS sandbox its commands ran in.
    pub sandbox: SandboxFacts,
    /// Every program its commands ran.
    pub programs: Vec<ProgramRun>,
    /// The MCP servers as the approval pinned them, by name.
    pub mcp: BTreeMap<String, HeaderPin>,
    /// Every host and port its commands asked the proxy for, allowed or refused.
    pub network: Vec<HostRequests>,
    /// Its model traffic, as a digest.
    pub model: ModelTraffic,
    /// Each step's outcome, in plan order.
    pub steps: Vec<StepFacts>,
    /// What it wrote.
    pub files: FileFacts,
}

/// The run itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFacts {
    /// Its id.
    pub run_id: String,
    /// `completed`, `failed`, `interrupted`, `cancelled`.
    pub status: String,
    /// The exit code it ended with.
    pub exit_code: Option<i64>,
    /// Unix ms.
    pub started_at: i64,
    /// Unix ms.
    pub finished_at: Option<i64>,
    /// The acode-run that ran it.
    pub runner: String,
    /// The run whose model answers it replayed, if it was a replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFacts {
    /// Its `plan_id`.
    pub plan_id: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

/// The approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalFacts {
    /// `ssh`, `hmac` or `none`.
    pub scheme: String,
    /// Whether a key in force verified it when the run started.
    pub verified: bool,
    /// Who approved: the verified principals (SSH), else the claimed name.
    pub approver: String,
    /// The SSH signers that counted when the run started.
    #[serde(default)]
    pub signers: Vec<VerifiedSigner>,
    /// How many distinct approvers the policy required (SSH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<usize>,
    /// The approval document itself (its SSH signatures included), so `verify
    /// --allowed-signers` can check them again.
    pub authorization: Option<PlanAuthorization>,
}

/// The policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFacts {
    /// The fingerprint the approval is bound to (`none` for the built-in default).
    pub sha256: String,
}

/// The sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxFacts {
    /// The mode asked for.
    pub requested: String,
    /// The mode the commands ran in (`bwrap`, `landlock`, `none`).
    pub mode: String,
    /// The Landlock ABI, under Landlock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<i64>,
    /// Whether every promise of docs/security.md held.
    pub every_promise_held: bool,
    /// The promises that held, by name (`writes-confined`, `reads-confined`, …).
    pub held: Vec<String>,
    /// The promises that did not hold, one sentence each.
    pub not_held: Vec<String>,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepFacts {
    /// Its id.
    pub step_id: String,
    /// Its tool.
    pub tool: String,
    /// `completed`, `failed`, `blocked`, …
    pub status: String,
    /// Why, when not completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
}

/// What the run wrote beyond the subjects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileFacts {
    /// Whether the subjects stop at the limit (`workspace::changes::MAX_FILES`).
    pub truncated: bool,
    /// The paths the run's file tools deleted.
    pub deleted: Vec<String>,
}

/// Why an attestation cannot be written.
#[derive(Debug, Error)]
pub enum AttestError {
    /// The record cannot be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run has not ended (or is a stage's conversation, not a plan's run).
    #[error("run {0} has not finished: attest a run once it has ended")]
    NotFinished(String),
    /// The run is a draft's or review's conversation.
    #[error("run {0} is a {1} conversation, not a plan's run: only runs are attested")]
    NotARun(String, String),
    /// The run ended before acode-run recorded the files runs write.
    #[error(
        "run {0} did not record the files it wrote (it was recorded by an acode-run without attestations): run it again to attest it"
    )]
    NoFiles(String),
    /// The run's header does not read.
    #[error("run {0}: its recorded approval and sandbox are missing, so nothing can be attested")]
    NoHeader(String),
}

/// The statement about `run_id` (an exact id or unique prefix), read from `store`.
pub fn statement(store: &Store, run_id: &str) -> Result<Statement, AttestError> {
    let run = store.run(run_id)?;
    let run_id = run.run_id.clone();
    if run.kind != "run" {
        return Err(AttestError::NotARun(run_id, run.kind));
    }
    if run.finished_at.is_none() {
        return Err(AttestError::NotFinished(run_id));
    }
    if !store.run_files_recorded(&run_id)? {
        return Err(AttestError::NoFiles(run_id));
    }
    let header = store
        .run_header(&run_id)?
        .ok_or_else(|| AttestError::NoHeader(run_id.clone()))?;
    let files = store.run_files(&run_id)?.unwrap_or_default();
    let subject = files
        .files
        .iter()
        .map(|f| Subject {
            name: f.path.clone(),
            digest: BTreeMap::from([("sha256".to_string(), f.sha256.clone())]),
        })
        .collect();
    let mode = run.sandbox.clone().unwrap_or_else(|| "none".into());
    let not_held = header.promises_not_held.clone();
    let steps = store
        .steps(&run_id)?
        .into_iter()
        .map(|s| StepFacts {
            step_id: s.step_id,
            tool: s.tool,
            status: s.status.as_str().to_string(),
            error_code: s.error_code,
        })
        .collect();
    let a = &header.approval;
    Ok(Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject,
        predicate_type: PREDICATE_TYPE.into(),
        predicate: RunPredicate {
            run: RunFacts {
                run_id: run_id.clone(),
                status: run.status.as_str().to_string(),
                exit_code: run.exit_code,
                started_at: run.started_at,
                finished_at: run.finished_at,
                runner: format!("acode-run {}", env!("CARGO_PKG_VERSION")),
                replay_of: store.replay_of(&run_id)?,
            },
            plan: PlanFacts {
                plan_id: run.plan_id.clone(),
                sha256: run.plan_sha256.clone(),
            },
            approval: ApprovalFacts {
                scheme: if a.scheme.is_empty() {
                    "none".into()
                } else {
                    a.scheme.clone()
                },
                verified: a.signature == "verified",
                approver: a.decided_by.clone(),
                signers: a.signers.clone(),
                required: a.required,
                authorization: a.authorization.clone(),
            },
            policy: PolicyFacts {
                sha256: a.policy_sha256.clone(),
            },
            sandbox: SandboxFacts {
                requested: header.sandbox_requested.clone(),
                mode,
                landlock_abi: run.landlock_abi,
                every_promise_held: not_held.is_empty() && !header.promises_held.is_empty(),
                held: header.promises_held.clone(),
                not_held,
            },
            programs: store.programs_run(&run_id)?,
            mcp: header.mcp.clone(),
            network: store.hosts_requested(&run_id)?,
            model: store.model_traffic(&run_id)?,
            steps,
            files: FileFacts {
                truncated: files.truncated,
                deleted: store.deleted_by_tools(&run_id)?,
            },
        },
    })
}

/// The statement about `run_id` in a DSSE envelope signed with `key`, as the JSON written to the
/// attestation file, with how many subjects it names.
pub fn envelope(
    store: &Store,
    run_id: &str,
    key: &keys::AttestKey,
) -> Result<(Vec<u8>, usize), AttestError> {
    let statement = statement(store, run_id)?;
    let payload = serde_json::to_vec(&statement).unwrap_or_default();
    let env = dsse::Envelope::sign(PAYLOAD_TYPE, &payload, key);
    let mut out = serde_json::to_vec_pretty(&env).unwrap_or_default();
    out.push(b'\n');
    Ok((out, statement.subject.len()))
}
