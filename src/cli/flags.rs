//! Command-line definitions: each subcommand and each flag is defined once, with its documentation
//! and how it updates [`Args`]; `--help` is generated from these tables.
//!
//! Parsing returns [`Parsed::Help`] / [`Parsed::Version`] as values instead of exiting, so it is
//! testable and `main` decides what to print and which exit code to use.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use crate::policy::SandboxMode;

/// The subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Run an approved plan.
    Run,
    /// Continue an interrupted run.
    Resume,
    /// Validate a plan without running it.
    Validate,
    /// Show what a plan will do, with diffs, without running it.
    Preview,
    /// Approve a plan.
    Approve,
    /// Reject a plan.
    Reject,
    /// List recent runs.
    Runs,
    /// Show one run.
    Show,
    /// Print one artifact.
    Artifact,
    /// Write a run's HTML report.
    Report,
    /// List tools and their schemas.
    Tools,
    /// List the skills found in the workspace.
    Skills,
    /// Draft a plan from a goal with the model (the planner stage).
    Draft,
    /// Judge a finished run against its goal (the reviewer stage).
    Review,
    /// Draft, approve at a terminal, run and review in one go.
    Do,
    /// Print a JSON Schema.
    Schema,
    /// Convert a plan written for another runner (odincode).
    Import,
    /// Serve acode-run's plan tools over MCP (stdio), or list the policy's MCP servers' tools.
    Mcp,
    /// Write a run's recorded model traffic as a replay file, or its rows as JSON Lines.
    Export,
    /// Write a recorded run's signed attestation (in-toto, DSSE).
    Attest,
    /// Check an attestation offline.
    Verify,
    /// Merge run databases from many machines into one.
    Merge,
    /// Say which sandbox modes work here, which promises hold, and what a run would use.
    Doctor,
}

/// A subcommand's definition: name, positional arguments and one-line description.
pub struct CommandDef {
    /// The command.
    pub command: Command,
    /// Its name on the command line.
    pub name: &'static str,
    /// Positional arguments, for usage lines.
    pub positionals: &'static [&'static str],
    /// What it does.
    pub about: &'static str,
}

/// Every subcommand.
pub const COMMANDS: &[CommandDef] = &[
    CommandDef {
        command: Command::Run,
        name: "run",
        positionals: &["PLAN"],
        about: "Run an approved plan (the default: `acode-run PLAN` is `acode-run run PLAN`)",
    },
    CommandDef {
        command: Command::Resume,
        name: "resume",
        positionals: &["RUN_ID"],
        about: "Continue an interrupted run of the same, unchanged plan (completed steps are kept)",
    },
    CommandDef {
        command: Command::Validate,
        name: "validate",
        positionals: &["PLAN"],
        about: "Check a plan completely without running anything",
    },
    CommandDef {
        command: Command::Preview,
        name: "preview",
        positionals: &["PLAN"],
        about: "Show what each step will do (argv, diffs of file steps simulated in order); nothing is written",
    },
    CommandDef {
        command: Command::Approve,
        name: "approve",
        positionals: &["PLAN"],
        about: "Validate a plan and record its approval (in the database and PLAN.approval)",
    },
    CommandDef {
        command: Command::Reject,
        name: "reject",
        positionals: &["PLAN"],
        about: "Record that a plan must not run (in the database and PLAN.approval)",
    },
    CommandDef {
        command: Command::Runs,
        name: "runs",
        positionals: &[],
        about: "List recent runs from the execution database",
    },
    CommandDef {
        command: Command::Show,
        name: "show",
        positionals: &["RUN_ID"],
        about: "Show a run's steps, executions and artifacts (a unique id prefix is enough)",
    },
    CommandDef {
        command: Command::Artifact,
        name: "artifact",
        positionals: &["EXECUTION_ID", "[TYPE]"],
        about: "Print one artifact (stdout, stderr, diff, diagnostics, prompt, response, ...); without TYPE, list the execution's artifacts",
    },
    CommandDef {
        command: Command::Report,
        name: "report",
        positionals: &["[RUN_ID]"],
        about: "Write a run's report as one self-contained HTML file (--html FILE; `-` for stdout) or JUnit (--junit FILE); without RUN_ID, of every run in the database: the fleet page, a testsuite per run",
    },
    CommandDef {
        command: Command::Draft,
        name: "draft",
        positionals: &["[GOAL]"],
        about: "Draft a plan for GOAL with the model (read-only look at the workspace); written unapproved",
    },
    CommandDef {
        command: Command::Review,
        name: "review",
        positionals: &["RUN_ID"],
        about: "Have the model judge a finished run against its goal (exit 35: changes requested)",
    },
    CommandDef {
        command: Command::Do,
        name: "do",
        positionals: &["GOAL"],
        about: "Draft → preview → approve at a terminal → run → review; without a terminal it stops after the draft",
    },
    CommandDef {
        command: Command::Tools,
        name: "tools",
        positionals: &[],
        about: "List every tool with the JSON schema of its arguments, the policy's MCP tools included (their servers are started to describe them)",
    },
    CommandDef {
        command: Command::Skills,
        name: "skills",
        positionals: &[],
        about: "List the skills found in the workspace (.acode/skills, then .claude/skills)",
    },
    CommandDef {
        command: Command::Import,
        name: "import",
        positionals: &["odincode", "PLAN"],
        about: "Convert an odincode plan to an acode-run plan (never approved) with a per-step report: \
                lossless, lossy (what is lost) or refused (why). Exit 0 all lossless, 40 written with \
                losses, 41 a step or the plan refused, 2 not an odincode plan (docs/odincode.md)",
    },
    CommandDef {
        command: Command::Mcp,
        name: "mcp",
        positionals: &["[tools]", "[POLICY]", "[PLAN]"],
        about: "Serve validate/preview/submit/status tools to an agent over MCP (stdio); `mcp tools [POLICY] [PLAN]` (or `mcp tools PLAN`) lists what the policy's MCP servers offer and whether it matches PLAN's pins",
    },
    CommandDef {
        command: Command::Export,
        name: "export",
        positionals: &["RUN_ID", "[FILE]"],
        about: "Write a run's model traffic (redacted, as stored) with --replay FILE: JSON Lines that `run --replay FILE` answers agent steps from; or every row of the run for a warehouse with --jsonl [FILE] (one object per row, `table` tagged; docs/export.schema.json)",
    },
    CommandDef {
        command: Command::Merge,
        name: "merge",
        positionals: &["OUT", "[IN...]"],
        about: "Merge run databases from many machines into OUT (created, or merged into): idempotent, a run id with different content refused (exit 46), a database it cannot take refused (exit 47); all or nothing",
    },
    CommandDef {
        command: Command::Attest,
        name: "attest",
        positionals: &["RUN_ID", "FILE"],
        about: "Write a recorded run's attestation to FILE: an in-toto Statement in a DSSE envelope signed with ACODE_ATTEST_KEY_FILE (docs/attestations.md)",
    },
    CommandDef {
        command: Command::Verify,
        name: "verify",
        positionals: &["ATTESTATION"],
        about: "Check an attestation offline: its signature (--key), its subjects against the files (--workspace), its approval (--allowed-signers); exit 0 when all hold",
    },
    CommandDef {
        command: Command::Doctor,
        name: "doctor",
        positionals: &[],
        about: "Which sandbox modes work here and which `auto` picks (and why the others fail), which promises hold, whether the network proxy starts, the toolchain it was built with, the database and policy a run would use; --require PROMISE fails closed (exit 39)",
    },
    CommandDef {
        command: Command::Schema,
        name: "schema",
        positionals: &["plan|events"],
        about: "Print the JSON Schema of plan files or of --jsonl events",
    },
];

pub use crate::executor::callbacks::ConfirmMode;

/// Everything the command line said.
#[derive(Debug, Clone)]
pub struct Args {
    /// The subcommand.
    pub command: Command,
    /// Positional arguments after the subcommand.
    pub positionals: Vec<String>,
    /// `--workspace`.
    pub workspace: Option<PathBuf>,
    /// `--var`.
    pub vars: BTreeMap<String, String>,
    /// `--db`.
    pub db: Option<PathBuf>,
    /// `--confirm`.
    pub confirm: Option<ConfirmMode>,
    /// `--approve`.
    pub approve: bool,
    /// `--resume`.
    pub resume: bool,
    /// `--rerun-interrupted`.
    pub rerun_interrupted: bool,
    /// `--by`.
    pub by: Option<String>,
    /// `--reason`.
    pub reason: Option<String>,
    /// `--jsonl`.
    pub jsonl: bool,
    /// `--json`.
    pub json: bool,
    /// `--policy`.
    pub policy: Option<PathBuf>,
    /// `--sandbox`.
    pub sandbox: Option<SandboxMode>,
    /// `--quiet`.
    pub quiet: bool,
    /// `--limit`.
    pub limit: usize,
    /// `--llm-url`.
    pub llm_url: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--tool-protocol`.
    pub tool_protocol: Option<crate::llm::ToolProtocol>,
    /// `--token-budget`.
    pub token_budget: Option<u64>,
    /// `--llm-retries`.
    pub llm_retries: Option<u32>,
    /// `--llm-provider`.
    pub llm_provider: Option<crate::llm::Provider>,
    /// `--llm-ca-cert`.
    pub llm_ca_cert: Option<PathBuf>,
    /// `--junit`.
    pub junit: Option<PathBuf>,
    /// `--sarif`.
    pub sarif: Option<PathBuf>,
    /// `--report-html` (run, resume) and `--html` (report): where the HTML report goes.
    pub report_html: Option<PathBuf>,
    /// `--output` / `-o`.
    pub output: Option<PathBuf>,
    /// `--max-attempts`.
    pub max_attempts: Option<u32>,
    /// `--revise`.
    pub revise: Option<PathBuf>,
    /// `--feedback`.
    pub feedback: Option<String>,
    /// `--from-review`.
    pub from_review: Option<String>,
    /// `--goal`.
    pub goal: Option<String>,
    /// `--annotations`; `None` means "github when `GITHUB_ACTIONS=true`".
    pub annotations: Option<Annotations>,
    /// `--max-calls-per-answer`.
    pub max_calls_per_answer: Option<usize>,
    /// `--jobs`.
    pub jobs: Option<usize>,
    /// `--strict`.
    pub strict: bool,
    /// `--intent` (draft): the intent the drafted plan must declare.
    pub intent: Option<crate::plan::Intent>,
    /// `--replay`: the run or file a run replays; the file `export` writes.
    pub replay: Option<String>,
    /// `--replay-lenient`.
    pub replay_lenient: bool,
    /// `--sign`: the SSH key an approval or rejection is signed with.
    pub sign: Option<PathBuf>,
    /// `--message`: where `approve`/`reject` writes the message to sign, instead of deciding.
    pub message: Option<PathBuf>,
    /// `--add-signature`: a signature file to attach to the decision.
    pub add_signature: Option<PathBuf>,
    /// `--attest`: where `run` writes its attestation.
    pub attest: Option<PathBuf>,
    /// `--key`: the public key `verify` checks an attestation's signature with.
    pub key: Option<PathBuf>,
    /// `--allowed-signers`: the file `verify` checks the approval inside an attestation with.
    pub allowed_signers: Option<PathBuf>,
    /// `--from-dir` (merge).
    pub from_dir: Option<PathBuf>,
    /// `--require`: the sandbox promises that must hold here.
    pub require: Vec<crate::sandbox::promises::Promise>,
    /// Flags given, for the applicability check.
    used: Vec<&'static str>,
}

/// Which CI system's annotations a run writes (`--annotations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Annotations {
    /// None, even on GitHub Actions.
    None,
    /// GitHub Actions workflow commands on stderr and a `$GITHUB_STEP_SUMMARY` table.
    Github,
}

impl std::str::FromStr for Annotations {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Annotations::None),
            "github" => Ok(Annotations::Github),
            other => Err(format!(
                "unknown annotations kind {other:?} (expected github or none)"
            )),
        }
    }
}

impl Default for Args {
    fn default() -> Self {
        Args {
            command: Command::Run,
            positionals: Vec::new(),
            workspace: None,
            vars: BTreeMap::new(),
            db: None,
            confirm: None,
            approve: false,
            resume: false,
            rerun_interrupted: false,
            by: None,
            reason: None,
            jsonl: false,
            json: false,
            policy: None,
            sandbox: None,
            quiet: false,
            limit: 20,
            llm_url: None,
            model: None,
            tool_protocol: None,
            token_budget: None,
            llm_retries: None,
            llm_provider: None,
            llm_ca_cert: None,
            junit: None,
            sarif: None,
            report_html: None,
            output: None,
            max_attempts: None,
            revise: None,
            feedback: None,
            from_review: None,
            goal: None,
            annotations: None,
            max_calls_per_answer: None,
            jobs: None,
            strict: false,
            intent: None,
            replay: None,
            replay_lenient: false,
            sign: None,
            message: None,
            add_signature: None,
            attest: None,
            key: None,
            allowed_signers: None,
            from_dir: None,
            require: Vec::new(),
            used: Vec::new(),
        }
    }
}

/// One flag: its name, value, documentation, the commands it applies to, and how it updates `Args`.
pub struct Flag {
    /// Long name without dashes.
    pub name: &'static str,
    /// Name of its value, if it takes one.
    pub value: Option<&'static str>,
    /// What it does.
    pub doc: &'static str,
    /// The commands it applies to.
    pub commands: &'static [Command],
    /// Applies the flag.
    pub update: fn(&mut Args, Option<String>) -> Result<(), String>,
}

use Command::*;

const PLAN_CMDS: &[Command] = &[Run, Resume, Validate, Preview, Approve];
const DB_CMDS: &[Command] = &[
    Run, Resume, Approve, Reject, Runs, Show, Artifact, Report, Draft, Review, Do, Mcp, Export,
    Attest, Doctor,
];
const EXEC_CMDS: &[Command] = &[Run, Resume];
/// Commands that write a SARIF file: a run, or `report` of a recorded one.
const SARIF_CMDS: &[Command] = &[Run, Resume, Report];
const LLM_CMDS: &[Command] = &[Run, Resume, Draft, Review, Do];
const STAGE_CMDS: &[Command] = &[Draft, Review, Do];

fn val(v: Option<String>) -> Result<String, String> {
    v.ok_or_else(|| "a value is required".to_string())
}

/// Every flag.
pub const FLAGS: &[Flag] = &[
    Flag {
        name: "workspace",
        value: Some("DIR"),
        doc: "Workspace root; every plan path is relative to it and tools never leave it [default: .]",
        commands: &[
            Run, Resume, Validate, Preview, Approve, Reject, Runs, Show, Artifact, Report, Skills,
            Import, Mcp, Draft, Review, Do, Tools, Export, Attest, Verify, Import, Mcp, Draft,
            Review, Do, Tools, Export, Doctor,
        ],
        update: |a, v| {
            a.workspace = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "var",
        value: Some("NAME=VALUE"),
        doc: "Override a variable the plan declares (repeatable)",
        commands: PLAN_CMDS,
        update: |a, v| {
            let v = val(v)?;
            let (k, value) = v
                .split_once('=')
                .ok_or_else(|| format!("expected NAME=VALUE, got {v:?}"))?;
            if !crate::plan::variables::is_name(k) {
                return Err(format!("invalid variable name {k:?}"));
            }
            a.vars.insert(k.to_string(), value.to_string());
            Ok(())
        },
    },
    Flag {
        name: "output",
        value: Some("FILE"),
        doc: "Where `draft` or `import` writes the plan (-o) [default: plan.json; a revision: OLD-vN.json beside the old plan; import: PLAN.acode.json beside PLAN]",
        commands: &[Draft, Do, Import],
        update: |a, v| {
            a.output = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "max-attempts",
        value: Some("N"),
        doc: "Answers the model may give before a draft or review fails [default: 3]",
        commands: STAGE_CMDS,
        update: |a, v| {
            let n: u32 = val(v)?.parse().map_err(|e| format!("{e}"))?;
            if n == 0 {
                return Err("must be at least 1".into());
            }
            a.max_attempts = Some(n);
            Ok(())
        },
    },
    Flag {
        name: "intent",
        value: Some("INTENT"),
        doc: "The intent the drafted plan declares: read, query or explain (changes nothing; enforced by validation) or mutate",
        commands: &[Draft, Do],
        update: |a, v| {
            let v = val(v)?;
            a.intent = Some(
                crate::plan::Intent::from_name(&v.to_ascii_lowercase()).ok_or_else(|| {
                    format!("unknown intent {v:?} (expected read, query, explain or mutate)")
                })?,
            );
            Ok(())
        },
    },
    Flag {
        name: "revise",
        value: Some("PLAN"),
        doc: "Draft the next version of PLAN, from the reason it was rejected (or --feedback / --from-review)",
        commands: &[Draft],
        update: |a, v| {
            a.revise = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "feedback",
        value: Some("TEXT"),
        doc: "Why the plan given to --revise must change",
        commands: &[Draft],
        update: |a, v| {
            a.feedback = Some(val(v)?);
            Ok(())
        },
    },
    Flag {
        name: "from-review",
        value: Some("RUN_ID"),
        doc: "Revise from the findings of `acode-run review RUN_ID`",
        commands: &[Draft],
        update: |a, v| {
            a.from_review = Some(val(v)?);
            Ok(())
        },
    },
    Flag {
        name: "goal",
        value: Some("TEXT"),
        doc: "The goal a review judges the run against [default: the plan's description]",
        commands: &[Review],
        update: |a, v| {
            a.goal = Some(val(v)?);
            Ok(())
        },
    },
    Flag {
        name: "junit",
        value: Some("FILE"),
        doc: "Write a JUnit XML report of the run to FILE (one testcase per step); `report` without RUN_ID: a testsuite per run",
        commands: &[Run, Resume, Report],
        update: |a, v| {
            a.junit = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "sarif",
        value: Some("FILE"),
        doc: "Write a SARIF 2.1.0 file of the run to FILE for code scanning: lsp_check diagnostics, failed steps, refused network requests and sandbox violations (docs/observability.md)",
        commands: SARIF_CMDS,
        update: |a, v| {
            a.sarif = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "report-html",
        value: Some("FILE"),
        doc: "Write the run's HTML report to FILE (docs/report.md), also when the run fails or is refused",
        commands: EXEC_CMDS,
        update: |a, v| {
            a.report_html = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "from-dir",
        value: Some("DIR"),
        doc: "Also merge every *.db file under DIR (links not followed), e.g. a CI's downloaded artifacts",
        commands: &[Merge],
        update: |a, v| {
            a.from_dir = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "html",
        value: Some("FILE"),
        doc: "The file the report is written to (`-`: stdout)",
        commands: &[Report],
        update: |a, v| {
            a.report_html = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "annotations",
        value: Some("KIND"),
        doc: "CI annotations for failed steps and diagnostics: github or none [default: github when $GITHUB_ACTIONS is true]",
        commands: EXEC_CMDS,
        update: |a, v| {
            a.annotations = Some(val(v)?.parse()?);
            Ok(())
        },
    },
    Flag {
        name: "db",
        value: Some("PATH"),
        doc: "Execution database [default: $ACODE_DB, else WORKSPACE/.acode/executions.db]",
        commands: DB_CMDS,
        update: |a, v| {
            a.db = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "confirm",
        value: Some("MODE"),
        doc: "prompt, auto-approve or auto-deny [default: prompt on a terminal, else auto-deny] (validate/preview: say what this mode will do to the steps that ask)",
        commands: &[Run, Resume, Validate, Preview],
        update: |a, v| {
            a.confirm = Some(match val(v)?.as_str() {
                "prompt" => ConfirmMode::Prompt,
                "auto-approve" => ConfirmMode::AutoApprove,
                "auto-deny" => ConfirmMode::AutoDeny,
                other => {
                    return Err(format!(
                        "unknown mode {other:?} (expected prompt, auto-approve or auto-deny)"
                    ));
                }
            });
            Ok(())
        },
    },
    Flag {
        name: "approve",
        value: None,
        doc: "Approve the plan and run it in one go (the approval is recorded)",
        commands: &[Run],
        update: |a, _| {
            a.approve = true;
            Ok(())
        },
    },
    Flag {
        name: "resume",
        value: None,
        doc: "Continue the newest interrupted run of this plan instead of starting a new one",
        commands: &[Run],
        update: |a, _| {
            a.resume = true;
            Ok(())
        },
    },
    Flag {
        name: "rerun-interrupted",
        value: None,
        doc: "When resuming, also re-run a step that was cut off mid-way although its tool is not idempotent",
        commands: &[Run, Resume],
        update: |a, _| {
            a.rerun_interrupted = true;
            Ok(())
        },
    },
    Flag {
        name: "by",
        value: Some("NAME"),
        doc: "Who approves or rejects [default: $ACODE_USER, else the CI's actor, else the login name]",
        commands: &[Run, Approve, Reject],
        update: |a, v| {
            a.by = Some(val(v)?);
            Ok(())
        },
    },
    Flag {
        name: "sign",
        value: Some("KEY"),
        doc: "Sign the decision with your SSH key through ssh-keygen: a private key file, or a public key whose private half is in ssh-agent (docs/approvals.md)",
        commands: &[Approve, Reject],
        update: |a, v| {
            a.sign = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "message",
        value: Some("FILE"),
        doc: "Write the exact message an approver signs to FILE and decide nothing (sign it with ssh-keygen -Y sign -n acode-run-approval -f KEY FILE, then --add-signature FILE.sig)",
        commands: &[Approve, Reject],
        update: |a, v| {
            a.message = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "add-signature",
        value: Some("FILE"),
        doc: "Attach an SSH signature made elsewhere (ssh-keygen -Y sign over the --message file) to the decision; earlier signatures of the same decision are kept",
        commands: &[Approve, Reject],
        update: |a, v| {
            a.add_signature = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "attest",
        value: Some("FILE"),
        doc: "Write the run's attestation to FILE when it ends, signed with ACODE_ATTEST_KEY_FILE (checked before the run starts; docs/attestations.md)",
        commands: &[Run, Resume],
        update: |a, v| {
            a.attest = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "key",
        value: Some("FILE"),
        doc: "The public key (OpenSSH or PEM) the attestation must be signed with",
        commands: &[Verify],
        update: |a, v| {
            a.key = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "allowed-signers",
        value: Some("FILE"),
        doc: "Check the approval inside the attestation against this allowed_signers file (git's format)",
        commands: &[Verify],
        update: |a, v| {
            a.allowed_signers = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "reason",
        value: Some("TEXT"),
        doc: "Why, recorded with the decision in the execution database",
        commands: &[Run, Approve, Reject],
        update: |a, v| {
            a.reason = Some(val(v)?);
            Ok(())
        },
    },
    Flag {
        name: "policy",
        value: Some("FILE"),
        doc: "Policy file [default: WORKSPACE/acode-policy.json if present]",
        commands: &[
            Run, Resume, Validate, Preview, Approve, Import, Tools, Doctor,
        ],
        update: |a, v| {
            a.policy = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "sandbox",
        value: Some("MODE"),
        doc: "OS sandbox for commands: auto, landlock, bwrap or none [default: the policy's, else auto]",
        commands: &[Run, Resume, Doctor],
        update: |a, v| {
            a.sandbox = Some(val(v)?.parse()?);
            Ok(())
        },
    },
    Flag {
        name: "llm-url",
        value: Some("URL"),
        doc: "Base URL of the LLM server for agent steps, http:// or https:// [default: $ACODE_LLM_URL, else http://127.0.0.1:11434/v1, or https://api.anthropic.com/v1 for --llm-provider anthropic]",
        commands: LLM_CMDS,
        update: |a, v| {
            a.llm_url = Some(val(v)?);
            Ok(())
        },
    },
    Flag {
        name: "llm-provider",
        value: Some("P"),
        doc: "Wire protocol of the LLM server: openai (/chat/completions), ollama (/api/chat) or anthropic (/messages) [default: $ACODE_LLM_PROVIDER, else openai]",
        commands: LLM_CMDS,
        update: |a, v| {
            a.llm_provider = Some(val(v)?.parse()?);
            Ok(())
        },
    },
    Flag {
        name: "llm-ca-cert",
        value: Some("FILE"),
        doc: "PEM file of a CA to trust for an https:// LLM server, besides the built-in roots [default: $ACODE_LLM_CA_CERT]",
        commands: LLM_CMDS,
        update: |a, v| {
            a.llm_ca_cert = Some(PathBuf::from(val(v)?));
            Ok(())
        },
    },
    Flag {
        name: "model",
        value: Some("NAME"),
        doc: "Model for agent steps that name none [default: $ACODE_MODEL]",
        commands: LLM_CMDS,
        update: |a, v| {
            a.model = Some(val(v)?);
            Ok(())
        },
    },
    Flag {
        name: "tool-protocol",
        value: Some("P"),
        doc: "native (the server's tool calling) or react (JSON in text, for models without it) [default: native]",
        commands: LLM_CMDS,
        update: |a, v| {
            a.tool_protocol = Some(val(v)?.parse()?);
            Ok(())
        },
    },
    Flag {
        name: "token-budget",
        value: Some("N"),
        doc: "Most LLM tokens (prompt + completion) the run may use; an agent step past it fails",
        commands: LLM_CMDS,
        update: |a, v| {
            let v = val(v)?;
            a.token_budget = Some(
                v.parse()
                    .map_err(|_| format!("expected a number of tokens, got {v:?}"))?,
            );
            Ok(())
        },
    },
    Flag {
        name: "llm-retries",
        value: Some("N"),
        doc: "Retries of a failed LLM request (connection errors, 408, 429, 5xx) with backoff 1 s, 2 s, 4 s… [default: 3]",
        commands: LLM_CMDS,
        update: |a, v| {
            let v = val(v)?;
            let n: u32 = v
                .parse()
                .map_err(|_| format!("expected a number of retries, got {v:?}"))?;
            if n > 10 {
                return Err("at most 10 retries".to_string());
            }
            a.llm_retries = Some(n);
            Ok(())
        },
    },
    Flag {
        name: "strict",
        value: None,
        doc: "Fail an agent step (exit 32) when any of its model's tool calls is refused as a sandbox violation",
        commands: EXEC_CMDS,
        update: |a, _| {
            a.strict = true;
            Ok(())
        },
    },
    Flag {
        name: "jobs",
        value: Some("N"),
        doc: "Steps run at once where the plan's depends_on allows (1-256); writers to the same paths never overlap [default: the smaller of the policy's jobs and the plan's defaults.jobs, else 1]",
        commands: EXEC_CMDS,
        update: |a, v| {
            let v = val(v)?;
            match v.parse::<usize>() {
                Ok(n) if (1..=crate::policy::MAX_JOBS).contains(&n) => a.jobs = Some(n),
                _ => return Err(format!("expected a number from 1 to 256, got {v:?}")),
            }
            Ok(())
        },
    },
    Flag {
        name: "max-calls-per-answer",
        value: Some("N"),
        doc: "Most tool calls run from one model answer (1-1000); the rest are refused back to the model [default: 16]",
        commands: EXEC_CMDS,
        update: |a, v| {
            let v = val(v)?;
            match v.parse::<usize>() {
                Ok(n @ 1..=1000) => a.max_calls_per_answer = Some(n),
                _ => return Err(format!("expected a number from 1 to 1000, got {v:?}")),
            }
            Ok(())
        },
    },
    Flag {
        name: "replay",
        value: Some("RUN_ID|FILE"),
        doc: "run: answer agent steps from a recorded run (its id) or a replay file instead of a model; a request that differs from the recorded one stops the step (exit 37; docs/replay.md). export: the replay file to write",
        commands: &[Run, Export],
        update: |a, v| {
            let v = val(v)?;
            if v.trim().is_empty() {
                return Err("a run id or a file is required".into());
            }
            a.replay = Some(v);
            Ok(())
        },
    },
    Flag {
        name: "replay-lenient",
        value: None,
        doc: "With --replay: answer by turn order even where a request differs, recording each divergence",
        commands: &[Run],
        update: |a, _| {
            a.replay_lenient = true;
            Ok(())
        },
    },
    Flag {
        name: "require",
        value: Some("PROMISE"),
        doc: "A sandbox promise that must hold here, else exit 39 before any step runs (repeatable, or comma-separated): writes-confined, reads-confined, environments-private, network-confined, processes-hidden, paths-hidden, ioctls-confined, signals-scoped (docs/ci.md)",
        commands: &[Run, Resume, Doctor],
        update: |a, v| {
            for name in val(v)?.split(',').map(str::trim) {
                let promise = name.parse()?;
                if !a.require.contains(&promise) {
                    a.require.push(promise);
                }
            }
            Ok(())
        },
    },
    Flag {
        name: "jsonl",
        value: None,
        doc: "Write one JSON event per line to stdout (nothing else goes to stdout); `export`: the run's rows, one object per line, to FILE or stdout",
        commands: &[Run, Resume, Draft, Review, Do, Export],
        update: |a, _| {
            a.jsonl = true;
            Ok(())
        },
    },
    Flag {
        name: "json",
        value: None,
        doc: "Print the result as JSON on stdout: one object (`runs`: one array of run objects)",
        commands: &[
            Run, Resume, Validate, Preview, Runs, Show, Skills, Import, Mcp, Tools, Artifact,
            Verify, Doctor,
        ],
        update: |a, _| {
            a.json = true;
            Ok(())
        },
    },
    Flag {
        name: "quiet",
        value: None,
        doc: "No progress lines on stderr (errors are still shown); `approve` skips the preview",
        commands: &[Run, Resume, Approve, Draft, Review, Do],
        update: |a, _| {
            a.quiet = true;
            Ok(())
        },
    },
    Flag {
        name: "limit",
        value: Some("N"),
        doc: "How many runs to list [default: 20]",
        commands: &[Runs],
        update: |a, v| {
            let v = val(v)?;
            a.limit = v
                .parse()
                .map_err(|_| format!("expected a number, got {v:?}"))?;
            Ok(())
        },
    },
];

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// Do the work.
    Run(Box<Args>),
    /// Print this help text and exit 0.
    Help(String),
    /// No command and no plan: print this usage on stderr and exit 2 (a script that calls
    /// `acode-run` with an empty variable must not pass).
    Usage(String),
    /// Print the version and exit 0.
    Version,
}

/// The version string.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Generates help: the overview when `command` is `None`, else one command's.
pub fn help(command: Option<Command>) -> String {
    let mut s = String::new();
    match command.and_then(|c| COMMANDS.iter().find(|d| d.command == c)) {
        None => {
            s.push_str(&format!(
                "acode-run {VERSION}: run approved agentic-coding plans in a sandbox, recording everything\n\n\
                 Usage: acode-run [COMMAND] [OPTIONS] [ARGS]\n       acode-run PLAN [OPTIONS]    (same as `acode-run run PLAN`)\n\nCommands:\n"
            ));
            for d in COMMANDS {
                s.push_str(&format!("  {:<10} {}\n", d.name, d.about));
            }
            s.push_str("\nRun `acode-run COMMAND --help` for a command's options.\n");
            s.push('\n');
            s.push_str(&crate::error::ExitCode::help_table());
        }
        Some(d) => {
            s.push_str(&format!(
                "acode-run {}: {}\n\nUsage: acode-run {}",
                d.name, d.about, d.name
            ));
            s.push_str(" [OPTIONS]");
            for p in d.positionals {
                s.push_str(&format!(" {p}"));
            }
            s.push_str("\n\nOptions:\n");
            for f in FLAGS.iter().filter(|f| f.commands.contains(&d.command)) {
                let left = match f.value {
                    Some(v) => format!("--{} {v}", f.name),
                    None => format!("--{}", f.name),
                };
                s.push_str(&format!("  {left:<22} {}\n", f.doc));
            }
            s.push_str(&format!("  {:<22} {}\n", "-h, --help", "Show this help"));
        }
    }
    s
}

/// Whether a first word that is no command is a plan path (`acode-run PLAN`): an existing file, or
/// something shaped like a path. Anything else is a mistyped command, not a missing plan.
fn looks_like_plan(word: &str) -> bool {
    std::path::Path::new(word).exists() || word.contains('/') || word.contains('.')
}

/// Words people type for a command, for suggestions only.
const ALIASES: &[(&str, &str)] = &[
    ("verify", "validate"),
    ("check", "validate"),
    ("lint", "validate"),
    ("accept", "approve"),
    ("deny", "reject"),
    ("list", "runs"),
    ("ls", "runs"),
    ("status", "runs"),
    ("log", "show"),
    ("inspect", "show"),
    ("continue", "resume"),
    ("restart", "resume"),
    ("exec", "run"),
    // No `init`: a plan is written by hand or drafted by a model.
    ("init", "draft"),
    ("new", "draft"),
    ("execute", "run"),
];

/// `unknown command "veryfy" (did you mean validate?)`, suggesting the command (or the command an
/// alias stands for) closest in edit distance, when one is close enough.
fn unknown_command(word: &str) -> String {
    let lower = word.to_ascii_lowercase();
    let best = COMMANDS
        .iter()
        .map(|d| (d.name, d.name))
        .chain(ALIASES.iter().copied())
        .map(|(typed, command)| (crate::suggest::edit_distance(&lower, typed), command))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, _)| crate::suggest::close_enough(*d, lower.chars().count()));
    match best {
        Some((_, command)) => {
            format!("unknown command {word:?} (did you mean {command}?); see `acode-run --help`")
        }
        None => format!("unknown command {word:?}; see `acode-run --help`"),
    }
}

/// Parses the arguments after the program name.
pub fn parse<I>(args: I) -> Result<Parsed, String>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let mut a = Args::default();
    let mut command: Option<Command> = None;
    let mut want_help = false;
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => want_help = true,
            Short('V') | Long("version") => return Ok(Parsed::Version),
            Long(name) => {
                let name = name.to_string();
                let flag = FLAGS.iter().find(|f| f.name == name).ok_or_else(|| {
                    format!(
                        "unknown option --{name}{} (see --help)",
                        crate::suggest::did_you_mean_as(
                            &name,
                            FLAGS.iter().map(|f| f.name),
                            |f| format!("--{f}")
                        )
                    )
                })?;
                let value = match flag.value {
                    Some(_) => Some(
                        parser
                            .value()
                            .map_err(|e| format!("--{name}: {e}"))?
                            .into_string()
                            .map_err(|_| format!("--{name}: value is not valid UTF-8"))?,
                    ),
                    None => None,
                };
                (flag.update)(&mut a, value).map_err(|e| format!("--{name}: {e}"))?;
                a.used.push(flag.name);
            }
            Short('o') => {
                let v = parser
                    .value()
                    .map_err(|e| format!("-o: {e}"))?
                    .into_string()
                    .map_err(|_| "-o: value is not valid UTF-8".to_string())?;
                a.output = Some(PathBuf::from(v));
                a.used.push("output");
            }
            Short(c) => return Err(format!("unknown option -{c} (see --help)")),
            Value(v) => {
                let v = v
                    .into_string()
                    .map_err(|_| "argument is not valid UTF-8".to_string())?;
                if command.is_none() && a.positionals.is_empty() {
                    if let Some(d) = COMMANDS.iter().find(|d| d.name == v) {
                        command = Some(d.command);
                        continue;
                    }
                    if !looks_like_plan(&v) {
                        return Err(unknown_command(&v));
                    }
                    command = Some(Command::Run);
                }
                a.positionals.push(v);
            }
        }
    }
    if want_help {
        return Ok(Parsed::Help(help(command)));
    }
    let Some(command) = command else {
        return Ok(Parsed::Usage(help(None)));
    };
    a.command = command;
    let def = COMMANDS
        .iter()
        .find(|d| d.command == command)
        .ok_or("unknown command")?;
    for name in &a.used {
        if let Some(f) = FLAGS.iter().find(|f| f.name == *name)
            && !f.commands.contains(&command)
        {
            return Err(format!(
                "--{name} does not apply to `acode-run {}`",
                def.name
            ));
        }
    }
    let required = def
        .positionals
        .iter()
        .filter(|p| !p.starts_with('['))
        .count();
    // A last positional written `...` takes any number.
    let most = if def
        .positionals
        .last()
        .is_some_and(|p| p.ends_with("...]") || p.ends_with("..."))
    {
        usize::MAX
    } else {
        def.positionals.len()
    };
    if a.positionals.len() < required || a.positionals.len() > most {
        return Err(format!(
            "`acode-run {}` takes {} (got {} argument{}); see `acode-run {} --help`",
            def.name,
            if def.positionals.is_empty() {
                "no arguments".to_string()
            } else {
                def.positionals.join(" ")
            },
            a.positionals.len(),
            if a.positionals.len() == 1 { "" } else { "s" },
            def.name
        ));
    }
    if command == Command::Run && a.by.is_some() && !a.approve {
        return Err(
            "--by names who approves, and `run` approves only with --approve: add --approve, or \
             approve first with `acode-run approve PLAN --by NAME`"
                .to_string(),
        );
    }
    if a.replay_lenient && a.replay.is_none() {
        return Err("--replay-lenient needs --replay RUN_ID|FILE".to_string());
    }
    if command == Command::Export && a.replay.is_some() == a.jsonl {
        return Err(
            "`acode-run export RUN_ID` needs --replay FILE (the run's model traffic, for a replay) \
             or --jsonl [FILE] (every row of the run, for a warehouse), not both"
                .to_string(),
        );
    }
    if command == Command::Export && a.replay.is_some() && a.positionals.len() > 1 {
        return Err("`acode-run export RUN_ID --replay FILE` takes no second argument".to_string());
    }
    if command == Command::Report
        && a.report_html.is_none()
        && a.junit.is_none()
        && a.sarif.is_none()
    {
        return Err(
            "`acode-run report` needs --html FILE, --junit FILE (`-` for stdout) or --sarif FILE"
                .to_string(),
        );
    }
    if a.json && a.jsonl {
        return Err("--json and --jsonl cannot be used together".to_string());
    }
    if [
        a.sign.is_some(),
        a.message.is_some(),
        a.add_signature.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count()
        > 1
    {
        return Err(
            "--sign, --message and --add-signature are three ways to sign: give one".to_string(),
        );
    }
    if command == Command::Verify && a.key.is_none() {
        return Err(
            "`acode-run verify ATTESTATION` needs --key FILE: the public key the attestation must be signed with"
                .to_string(),
        );
    }
    Ok(Parsed::Run(Box::new(a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Args {
        match parse(args.iter().map(|s| s.to_string())).unwrap() {
            Parsed::Run(a) => *a,
            other => panic!("expected run, got {other:?}"),
        }
    }

    #[test]
    fn bare_plan_means_run() {
        let a = run(&["plan.json", "--jsonl", "--var", "x=1"]);
        assert_eq!(a.command, Command::Run);
        assert_eq!(a.positionals, vec!["plan.json"]);
        assert!(a.jsonl);
        assert_eq!(a.vars.get("x").map(String::as_str), Some("1"));
    }

    #[test]
    fn help_and_version_are_values() {
        assert!(matches!(parse(["--version"]).unwrap(), Parsed::Version));
        match parse(["run", "--help"]).unwrap() {
            Parsed::Help(h) => {
                assert!(h.contains("--confirm MODE"), "{h}");
                assert!(!h.contains("--limit"), "{h}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(Vec::<String>::new()).unwrap(),
            Parsed::Usage(_)
        ));
    }

    #[test]
    fn unknown_commands_get_a_suggestion() {
        let e = parse(["valdate"]).unwrap_err();
        assert!(
            e.starts_with(r#"unknown command "valdate" (did you mean validate?)"#),
            "{e}"
        );
        let e = parse(["veryfy"]).unwrap_err();
        assert!(e.contains("did you mean verify?"), "{e}");
        let e = parse(["shwo", "abc"]).unwrap_err();
        assert!(e.contains(r#"did you mean show?"#), "{e}");
        let e = parse(["xyzzyplugh"]).unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
        // Path-shaped words are plans, even missing ones (the run reports the missing file).
        assert_eq!(run(&["missing.json"]).command, Command::Run);
        assert_eq!(run(&["plans/x"]).command, Command::Run);
    }

    #[test]
    fn usage_errors_are_specific() {
        assert!(parse(["run"]).unwrap_err().contains("takes PLAN"));
        assert!(
            parse(["runs", "--jsonl"])
                .unwrap_err()
                .contains("does not apply")
        );
        assert!(
            parse(["p.json", "--bogus"])
                .unwrap_err()
                .contains("unknown option --bogus")
        );
        assert!(
            parse(["p.json", "--confirm", "maybe"])
                .unwrap_err()
                .contains("unknown mode")
        );
        assert!(
            parse(["p.json", "--var", "novalue"])
                .unwrap_err()
                .contains("NAME=VALUE")
        );
        assert!(
            parse(["p.json", "--json", "--jsonl"])
                .unwrap_err()
                .contains("together")
        );
    }

    #[test]
    fn require_names_every_promise_and_takes_lists() {
        let doc = FLAGS.iter().find(|f| f.name == "require").unwrap().doc;
        assert!(
            doc.contains(&crate::sandbox::promises::Promise::names()),
            "{doc}"
        );
        let a = run(&[
            "doctor",
            "--require",
            "reads-confined, paths-hidden",
            "--require",
            "reads-confined",
        ]);
        assert_eq!(
            a.require.iter().map(|p| p.name()).collect::<Vec<_>>(),
            ["reads-confined", "paths-hidden"]
        );
        assert!(
            parse(["doctor", "--require", "reads-confined,"])
                .unwrap_err()
                .contains("unknown sandbox promise \"\"")
        );
    }
}
