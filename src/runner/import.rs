//! `acode-run import` as an operation on a [`Session`]: read another tool's plan, convert it
//! ([`crate::import::odincode`]) under the session's workspace and policy, and write the plan and
//! the policy its commands need beside it — never an approval, never over an existing file. The
//! caller prints the report and chooses the exit code from [`ImportOutcome::status`].

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::session::{Session, SessionError};
use crate::import::odincode::{self, Imported, Status};

/// Why nothing (or not everything) was imported.
#[derive(Debug, Error)]
pub enum ImportFailed {
    /// A plan format acode-run does not import.
    #[error("cannot import {0:?} plans (acode-run imports: odincode)")]
    UnknownKind(String),
    /// The input could not be read (missing, not a file, too large).
    #[error("{}: {source}", path.display())]
    Read {
        /// The input.
        path: PathBuf,
        /// Why.
        source: crate::input::InputError,
    },
    /// The input is not a plan of that format.
    #[error("{}: {source}", path.display())]
    Convert {
        /// The input.
        path: PathBuf,
        /// What is wrong, and where.
        source: odincode::ImportError,
    },
    /// An output file exists already (an earlier import, a hand-edited plan).
    #[error("{}: it exists (import never overwrites; choose another -o)", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// An output file could not be written.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The workspace or its policy.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// What an import wrote, and its report.
#[derive(Debug)]
pub struct ImportOutcome {
    /// Lossless, lossy (some steps approximated or left out) or refused (nothing written).
    pub status: Status,
    /// The plan written, unless the import was refused.
    pub plan: Option<PathBuf>,
    /// The policy written beside it, when its commands need one.
    pub policy: Option<PathBuf>,
    /// The conversion, with what happened to each step.
    pub imported: Imported,
}

/// `plan.json` → `plan.acode.json`, beside it.
fn default_output(input: &Path) -> PathBuf {
    input.with_file_name(format!("{}.acode.json", stem(input)))
}

/// `out.json` → `out.policy.json`, beside the plan.
fn policy_path(out: &Path) -> PathBuf {
    out.with_file_name(format!("{}.policy.json", stem(out)))
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plan".to_string())
}

/// [`crate::util::write_new`], its failure named.
fn write_new(path: &Path, text: &str) -> Result<(), ImportFailed> {
    crate::util::write_new(path, text.as_bytes()).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => ImportFailed::Exists {
            path: path.to_path_buf(),
        },
        _ => ImportFailed::Write {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Imports the `kind` plan at `input` into `output` (default: `NAME.acode.json` beside it) and,
/// when its commands need one, a policy beside that (`NAME.acode.policy.json`).
pub fn import_plan(
    session: &Session,
    kind: &str,
    input: &Path,
    output: Option<&Path>,
) -> Result<ImportOutcome, ImportFailed> {
    if kind != "odincode" {
        return Err(ImportFailed::UnknownKind(kind.to_string()));
    }
    let bytes = crate::input::read_bounded(input, crate::input::MAX_PLAN_BYTES, "plan file")
        .map_err(|source| ImportFailed::Read {
            path: input.to_path_buf(),
            source,
        })?;
    let policy = session.policy()?;
    let imported = odincode::import(&bytes, session.workspace(), &policy).map_err(|source| {
        ImportFailed::Convert {
            path: input.to_path_buf(),
            source,
        }
    })?;
    let out = output.map_or_else(|| default_output(input), Path::to_path_buf);
    let (mut plan, mut written_policy) = (None, None);
    if let Some(converted) = &imported.plan {
        if let Some(p) = &imported.policy {
            let path = policy_path(&out);
            write_new(&path, &format!("{p}\n"))?;
            written_policy = Some(path);
        }
        let mut text = crate::stages::draft::pretty_plan(converted);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        write_new(&out, &text)?;
        plan = Some(out);
    }
    Ok(ImportOutcome {
        status: imported.report.status(),
        plan,
        policy: written_policy,
        imported,
    })
}
