//! Which steps may run at the same time under `--jobs N` (docs/parallel.md).
//!
//! Dependencies decide *when* a step may start (all of its `depends_on` finished); this module
//! decides *beside what*: two steps that may touch the same path never run together, so a plan
//! means the same with `--jobs 8` as with `--jobs 1`. The rule, from what a step can write:
//!
//! - a **file step** touches the paths it names: `file_write`, `file_create`, `file_edit` and
//!   `file_delete` write theirs; `file_read`, `list_directory`, `file_search` and `file_glob` read
//!   theirs (a directory counts for everything beneath it, no root for the whole workspace);
//! - a **command, agent or `lsp_check` step** (and a step with a `command_succeeds` precondition or a
//!   `verify` command) may write anywhere in the workspace: it runs beside readers, never beside
//!   another writer — unless the plan marks it `"parallel_safe": true`, vouching that it writes only
//!   what no other step touches (tests that write under their own directory);
//! - readers run beside readers.
//!
//! The ready steps are kept ordered by their place in the plan's execution order, so with one job
//! the steps run exactly in that order, and with more the earliest ready step that fits starts first.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::plan::validate::substitute_arguments;
use crate::plan::variables::Variables;
use crate::plan::{Dependencies, FileEffect, Plan, Step};

/// Steps run at once unless `--jobs` or the policy's `jobs` says otherwise: one (docs/parallel.md).
/// Why not the machine's CPUs: with steps running at once, a step the plan declared independent
/// may already have started (and written) when an earlier one fails, so "stop on the first fatal
/// failure" would stop less than it does today, and the order of events and console lines would
/// vary from run to run. A plan that wants parallelism asks for it, and its approver sees it.
pub fn default_jobs() -> usize {
    1
}

pub use crate::events::JobsSource;

/// The steps a run takes at once, and where the number came from: `--jobs` when given (the person
/// running it decides for this run); else the smaller of the policy's `jobs` and the plan's
/// `defaults.jobs` (the policy caps what the machine gives, the plan says how much its steps can
/// use), either alone when only one is set; else [`default_jobs`] (docs/parallel.md).
pub fn effective_jobs(
    flag: Option<usize>,
    policy: Option<usize>,
    plan: Option<usize>,
) -> (usize, JobsSource) {
    match (flag, policy, plan) {
        (Some(n), _, _) => (n, JobsSource::Flag),
        (None, Some(p), Some(q)) if q < p => (q, JobsSource::Plan),
        (None, Some(p), _) => (p, JobsSource::Policy),
        (None, None, Some(q)) => (q, JobsSource::Plan),
        (None, None, None) => (default_jobs(), JobsSource::Default),
    }
}

/// What a step may touch, as far as running it beside another step is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Footprint {
    /// Reads these workspace-relative paths (normalised; `""` is the whole workspace).
    Reads(Vec<String>),
    /// Writes (and reads) these paths.
    Writes(Vec<String>),
    /// May write anywhere in the workspace (a command, an agent, `lsp_check`).
    Anywhere,
    /// Marked `parallel_safe`: runs beside anything.
    Independent,
}

impl Footprint {
    /// The footprint of `step` with its substituted arguments `args`.
    pub fn of(step: &Step, args: &Value) -> Footprint {
        let path = |key: &str| args.get(key).and_then(Value::as_str).map(normalise);
        match step.file_effect() {
            FileEffect::Reads => match step.tool.as_str() {
                "file_search" | "file_glob" => {
                    Footprint::Reads(vec![path("root").unwrap_or_default()])
                }
                // `history` reads the database, not the workspace.
                "history" => Footprint::Reads(Vec::new()),
                _ => Footprint::Reads(path("path").into_iter().collect()),
            },
            // A missing path is refused by validation; here it just means "the workspace".
            FileEffect::WritesPath => Footprint::Writes(vec![path("path").unwrap_or_default()]),
            FileEffect::Anywhere if step.parallel_safe => Footprint::Independent,
            FileEffect::Anywhere => Footprint::Anywhere,
        }
    }

    /// Whether the step is a file step, done in the runner's own process in microseconds (no
    /// command, no model): not worth a thread of its own.
    pub fn in_process(&self) -> bool {
        matches!(self, Footprint::Reads(_) | Footprint::Writes(_))
    }

    /// Whether a step with this footprint may not run while one with `other` is running.
    pub fn conflicts(&self, other: &Footprint) -> bool {
        use Footprint::*;
        match (self, other) {
            (Independent, _) | (_, Independent) => false,
            (Reads(_), Reads(_)) => false,
            (Anywhere, Reads(_)) | (Reads(_), Anywhere) => false,
            (Anywhere, _) | (_, Anywhere) => true,
            (Writes(a), Writes(b)) | (Writes(a), Reads(b)) | (Reads(b), Writes(a)) => {
                a.iter().any(|p| b.iter().any(|q| overlaps(p, q)))
            }
        }
    }
}

/// A workspace path as the plan wrote it, in the form paths are compared in: no `./`, no empty or
/// `.` components, no trailing `/`. (`..` is refused by validation before anything runs.)
fn normalise(p: &str) -> String {
    p.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether one path is the other or lies beneath it (`""` is the workspace root).
fn overlaps(a: &str, b: &str) -> bool {
    let beneath = |long: &str, short: &str| {
        short.is_empty()
            || long == short
            || (long.starts_with(short) && long.as_bytes().get(short.len()) == Some(&b'/'))
    };
    beneath(a, b) || beneath(b, a)
}

/// Plans up to this many steps get the pairwise answers of [`overlap`] (the pairs grow with the
/// square; a 100 000-step plan is approved and run without them).
pub const PAIRS_MAX_STEPS: usize = 2000;

/// Each step's footprint with its arguments substituted (`Anywhere` when they do not substitute:
/// such a plan is refused by validation anyway).
pub fn footprints(plan: &Plan, vars: &Variables) -> Vec<Footprint> {
    plan.steps
        .iter()
        .map(|s| {
            substitute_arguments(s, vars).map_or(Footprint::Anywhere, |a| Footprint::of(s, &a))
        })
        .collect()
}

/// Which steps may run at the same time when more than one job is allowed.
pub struct Overlap {
    /// For each step (by index), the steps it may run beside: neither waits for the other,
    /// directly or not, and their footprints do not conflict.
    pub beside: Vec<Vec<usize>>,
    /// For each step, whether some other step neither waits for it nor is waited for by it.
    pub independent: Vec<bool>,
}

/// [`Overlap`] for `plan` (`order`: its execution order), or `None` above [`PAIRS_MAX_STEPS`].
pub fn overlap(plan: &Plan, order: &[usize], footprints: &[Footprint]) -> Option<Overlap> {
    let n = plan.steps.len();
    if n > PAIRS_MAX_STEPS {
        return None;
    }
    let dependencies = plan.dependency_positions();
    // ancestors[i]: every step i waits for, directly or not (filled in dependency order).
    let mut ancestors = vec![vec![false; n]; n];
    for &i in order {
        for &d in dependencies.of(i) {
            let inherited = ancestors[d].clone();
            let mine = &mut ancestors[i];
            mine[d] = true;
            for (m, a) in mine.iter_mut().zip(inherited) {
                *m |= a;
            }
        }
    }
    let mut beside = vec![Vec::new(); n];
    let mut independent = vec![false; n];
    for i in 0..n {
        for j in i + 1..n {
            if ancestors[i][j] || ancestors[j][i] {
                continue;
            }
            independent[i] = true;
            independent[j] = true;
            if !footprints[i].conflicts(&footprints[j]) {
                beside[i].push(j);
                beside[j].push(i);
            }
        }
    }
    Some(Overlap {
        beside,
        independent,
    })
}

/// Why a step runs alone however many jobs are allowed, and what would change that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alone {
    /// Every other step waits for it or is waited for by it.
    Dependencies,
    /// Some steps are independent of it, but none may run beside it (what they may write).
    Writes,
}

impl Alone {
    /// The reason and the remedy, in a sentence (the header, `run_started`, `preview`).
    pub fn why(self) -> &'static str {
        match self {
            Alone::Dependencies => {
                "each waits for the others or they for it (a step without depends_on waits for \
                 the previous one); \"depends_on\": [] or naming an earlier step lets a step start \
                 beside others"
            }
            Alone::Writes => {
                "they may write where the steps independent of them read or write (a command, \
                 agent, lsp_check, MCP tool or verify may write anywhere, so it never runs beside \
                 another writer); \"parallel_safe\": true on a step that writes only what no \
                 other step touches lets it run beside anything"
            }
        }
    }
}

/// The steps of `plan` that run alone however many jobs are allowed, grouped by [`Alone`] (ids in
/// plan order); empty for a one-step plan.
pub fn run_alone(plan: &Plan, overlap: &Overlap) -> Vec<(Alone, Vec<String>)> {
    if plan.steps.len() < 2 {
        return Vec::new();
    }
    let mut groups: Vec<(Alone, Vec<String>)> = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if !overlap.beside[i].is_empty() {
            continue;
        }
        let why = if overlap.independent[i] {
            Alone::Writes
        } else {
            Alone::Dependencies
        };
        match groups.iter_mut().find(|(w, _)| *w == why) {
            Some((_, ids)) => ids.push(step.step_id.clone()),
            None => groups.push((why, vec![step.step_id.clone()])),
        }
    }
    groups
}

/// The dependency bookkeeping of a run: which steps are ready, in execution order.
pub struct Ready {
    /// Each step's place in the execution order.
    rank: Vec<usize>,
    /// Unfinished dependencies per step.
    waiting: Vec<usize>,
    /// Steps that depend on each step: those of step `i` are `dependents[starts[i]..starts[i + 1]]`
    /// (one flat list, like [`Dependencies`]).
    dependents: Vec<usize>,
    /// Where each step's dependents start in `dependents`.
    starts: Vec<usize>,
    /// Ready steps, by (rank, index).
    ready: BTreeSet<(usize, usize)>,
}

impl Ready {
    /// The bookkeeping for a plan whose steps depend on `dependencies`
    /// ([`crate::plan::Plan::dependency_positions`]), run in `order` (a dependency order of its step indexes).
    pub fn new(dependencies: &Dependencies, order: &[usize]) -> Ready {
        let n = dependencies.len();
        let mut rank = vec![0; n];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        // Each step waits for its dependencies; the reverse edges are laid out by counting first.
        let mut waiting = vec![0; n];
        let mut starts = vec![0; n + 1];
        for (i, wait) in waiting.iter_mut().enumerate() {
            *wait = dependencies.of(i).len();
            for &d in dependencies.of(i) {
                starts[d + 1] += 1;
            }
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut fill = starts.clone();
        let mut dependents = vec![0; starts[n]];
        for i in 0..n {
            for &d in dependencies.of(i) {
                dependents[fill[d]] = i;
                fill[d] += 1;
            }
        }
        let ready = (0..n)
            .filter(|&i| waiting[i] == 0)
            .map(|i| (rank[i], i))
            .collect();
        Ready {
            rank,
            waiting,
            dependents,
            starts,
            ready,
        }
    }

    /// The ready steps, earliest in the execution order first.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.ready.iter().map(|&(_, i)| i)
    }

    /// Whether no step is ready.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    /// Takes `i` out of the ready set (it is starting, or being recorded without running).
    pub fn take(&mut self, i: usize) {
        self.ready.remove(&(self.rank[i], i));
    }

    /// Step `i` is finished (whatever its status): the steps waiting only for it become ready.
    pub fn finished(&mut self, i: usize) {
        for &d in &self.dependents[self.starts[i]..self.starts[i + 1]] {
            self.waiting[d] -= 1;
            if self.waiting[d] == 0 {
                self.ready.insert((self.rank[d], d));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;

    fn plan(json: &str) -> Plan {
        crate::plan::parse::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn the_flag_wins_then_the_smaller_of_policy_and_plan_then_one() {
        use JobsSource::*;
        assert_eq!(effective_jobs(Some(3), Some(8), Some(1)), (3, Flag));
        assert_eq!(effective_jobs(Some(1), None, Some(8)), (1, Flag));
        assert_eq!(effective_jobs(None, Some(2), Some(4)), (2, Policy));
        assert_eq!(effective_jobs(None, Some(4), Some(2)), (2, Plan));
        assert_eq!(effective_jobs(None, Some(4), Some(4)), (4, Policy));
        assert_eq!(effective_jobs(None, Some(4), None), (4, Policy));
        assert_eq!(effective_jobs(None, None, Some(6)), (6, Plan));
        assert_eq!(effective_jobs(None, None, None), (1, Default));
        let p = plan(
            r#"{"plan_id":"p","defaults":{"jobs":5},"steps":[{"step_id":"a","tool":"file_read","arguments":{"path":"x"}}]}"#,
        );
        assert_eq!(p.defaults.jobs, Some(5));
    }

    fn footprint(json: &str) -> Footprint {
        let p = plan(&format!(r#"{{"plan_id":"p","steps":[{json}]}}"#));
        let step = &p.steps[0];
        Footprint::of(step, &step.arguments.to_value())
    }

    /// Validation's "may create files" and the scheduler's footprint come from one decision
    /// (`Step::file_effect`): a step that may create files is never a mere reader here.
    #[test]
    fn may_create_files_and_the_footprint_agree() {
        for (json, creates, fp) in [
            (
                r#"{"step_id":"a","tool":"mcp__fx__write","arguments":{}}"#,
                true,
                Footprint::Anywhere,
            ),
            (
                r#"{"step_id":"a","tool":"run_command","arguments":{"command":"true"}}"#,
                true,
                Footprint::Anywhere,
            ),
            (
                r#"{"step_id":"a","tool":"file_read","arguments":{"path":"x"}}"#,
                false,
                Footprint::Reads(vec!["x".into()]),
            ),
            (
                r#"{"step_id":"a","tool":"file_read","arguments":{"path":"x"},"verify":{"command":"true"}}"#,
                true,
                Footprint::Anywhere,
            ),
            (
                r#"{"step_id":"a","tool":"file_delete","arguments":{"path":"x"}}"#,
                false,
                Footprint::Writes(vec!["x".into()]),
            ),
            (
                r#"{"step_id":"a","tool":"file_edit","arguments":{"path":"x"}}"#,
                true,
                Footprint::Writes(vec!["x".into()]),
            ),
        ] {
            let p = plan(&format!(r#"{{"plan_id":"p","steps":[{json}]}}"#));
            assert_eq!(p.steps[0].may_create_files(), creates, "{json}");
            assert_eq!(footprint(json), fp, "{json}");
        }
    }

    #[test]
    fn file_steps_conflict_only_where_their_paths_overlap() {
        let w = |p: &str| {
            footprint(&format!(
                r#"{{"step_id":"a","tool":"file_write","arguments":{{"path":"{p}","contents":""}}}}"#
            ))
        };
        let r = |p: &str| {
            footprint(&format!(
                r#"{{"step_id":"a","tool":"file_read","arguments":{{"path":"{p}"}}}}"#
            ))
        };
        assert!(w("a.txt").conflicts(&w("./a.txt")));
        assert!(!w("a.txt").conflicts(&w("b.txt")));
        assert!(
            w("src/x.rs").conflicts(&r("src")),
            "a directory covers what is beneath it"
        );
        assert!(
            !w("src2/x").conflicts(&r("src")),
            "a name prefix is not a parent"
        );
        assert!(!r("a.txt").conflicts(&r("a.txt")), "readers run together");
        let search =
            footprint(r#"{"step_id":"s","tool":"file_search","arguments":{"pattern":"x"}}"#);
        assert!(
            search.conflicts(&w("deep/er/file")),
            "no root: the whole workspace"
        );
    }

    #[test]
    fn commands_run_beside_readers_but_not_beside_writers_unless_marked_safe() {
        let cmd =
            footprint(r#"{"step_id":"c","tool":"run_command","arguments":{"command":"true"}}"#);
        let safe = footprint(
            r#"{"step_id":"c","tool":"run_command","parallel_safe":true,"arguments":{"command":"true"}}"#,
        );
        let read = footprint(r#"{"step_id":"r","tool":"file_read","arguments":{"path":"a"}}"#);
        let write = footprint(
            r#"{"step_id":"w","tool":"file_write","arguments":{"path":"a","contents":""}}"#,
        );
        assert_eq!(cmd, Footprint::Anywhere);
        assert!(!cmd.conflicts(&read));
        assert!(cmd.conflicts(&write));
        assert!(cmd.conflicts(&cmd.clone()));
        assert!(!safe.conflicts(&cmd));
        assert!(!safe.conflicts(&write));
        // A reader whose precondition runs a command may write too.
        let checked = footprint(
            r#"{"step_id":"r","tool":"file_read","arguments":{"path":"a"},
                "precondition":{"command_succeeds":"true"}}"#,
        );
        assert_eq!(checked, Footprint::Anywhere);
    }

    #[test]
    fn ready_steps_come_in_execution_order_and_dependents_wait() {
        let p = plan(
            r#"{"plan_id":"p","steps":[
                {"step_id":"a","tool":"file_read","arguments":{"path":"x"}},
                {"step_id":"b","tool":"file_read","arguments":{"path":"x"}},
                {"step_id":"c","tool":"file_read","arguments":{"path":"x"},"depends_on":[]},
                {"step_id":"d","tool":"file_read","arguments":{"path":"x"},"depends_on":["a","c"]}]}"#,
        );
        let order = crate::plan::validate::dependency_order(&p).unwrap();
        let mut r = Ready::new(&p.dependency_positions(), &order);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![0, 2]);
        r.take(0);
        r.finished(0);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![1, 2]);
        r.take(2);
        r.finished(2);
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![1, 3],
            "d waited for a and c"
        );
    }
}
