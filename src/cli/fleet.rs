//! The command line's side of issue 48: `merge OUT IN… [--from-dir DIR]` and `export RUN_ID
//! --jsonl [FILE]` (`report` without a run id is in `reports.rs`).

use std::path::{Path, PathBuf};

use super::shell::Shell;
use super::{Args, CliError, query_store};
use crate::error::exit;

/// `merge OUT IN… [--from-dir DIR]`: the inputs into OUT, all or nothing; what it did on stderr.
pub(super) fn cmd_merge(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let out = PathBuf::from(&args.positionals[0]);
    let mut inputs: Vec<PathBuf> = args.positionals[1..].iter().map(PathBuf::from).collect();
    if let Some(dir) = &args.from_dir {
        let found = crate::store::merge::databases_in(dir)
            .map_err(|e| CliError::new(e.exit_code(), e.to_string()))?;
        inputs.extend(found);
    }
    let total = inputs.len();
    let quiet = args.quiet;
    let report = crate::store::merge::merge(&out, &inputs, |input| {
        if !quiet && total > 1 && total <= 20 {
            shell.err_line(format_args!("merging {}", input.display()));
        }
    })
    .map_err(|e| CliError::new(e.exit_code(), e.to_string()))?;
    shell.err_line(format_args!(
        "merged {} into {}: {} added, {} already there; {} decision and review row(s) added",
        crate::terminal::count(report.inputs, "database"),
        out.display(),
        crate::terminal::count(report.runs_added, "run"),
        report.runs_present,
        report.log_rows_added
    ));
    Ok(exit::OK)
}

/// `export RUN_ID --jsonl [FILE]`: every row of the run, one object per line, through this
/// process's redactor once more; to FILE (replaced whole, or not at all) or stdout.
pub(super) fn cmd_export_rows(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let store = query_store(args)?;
    let run_id = &args.positionals[0];
    let target = args.positionals.get(1).filter(|f| f.as_str() != "-");
    // Each row redacted by the Shell, to stdout or into the file.
    let write = |lines: &mut super::shell::JsonLines<'_>| -> Result<usize, crate::store::export::ExportError> {
        store.export_run(run_id, &mut |row| {
            lines.write(&serde_json::Value::Object(row))
        })
    };
    let failed = |e: crate::store::export::ExportError| match e {
        crate::store::export::ExportError::Store(e) => CliError::from(e),
        crate::store::export::ExportError::Io(e) => {
            CliError::new(exit::INTERNAL, format!("cannot write the rows: {e}"))
        }
    };
    let rows = match target {
        None => shell.out_json_lines(write).map_err(failed)?,
        Some(file) => {
            let path = Path::new(file);
            let temp = crate::util::temp_beside(path);
            let written = std::fs::File::create(&temp)
                .map_err(crate::store::export::ExportError::Io)
                .and_then(|f| {
                    let mut w = std::io::BufWriter::new(f);
                    let mut lines = shell.json_lines_to(&mut w);
                    let rows = write(&mut lines)?;
                    lines.flush()?;
                    Ok(rows)
                });
            let rows = match written {
                Ok(rows) => rows,
                Err(e) => {
                    let _ = std::fs::remove_file(&temp);
                    return Err(match e {
                        crate::store::export::ExportError::Io(e) => {
                            CliError::new(exit::USAGE, format!("cannot write {file}: {e}"))
                        }
                        other => failed(other),
                    });
                }
            };
            crate::util::replace_with(&temp, path)
                .map_err(|e| CliError::new(exit::USAGE, format!("cannot write {file}: {e}")))?;
            rows
        }
    };
    shell.err_line(format_args!(
        "wrote {} of run {run_id}{}",
        crate::terminal::count(rows, "row"),
        target.map(|f| format!(" to {f}")).unwrap_or_default()
    ));
    Ok(exit::OK)
}
