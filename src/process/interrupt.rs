//! Ctrl-C and SIGTERM, turned into a run's cancel flag without polling and without a thread: the
//! handler that `signal_hook::flag::register` installs stores `true` into the flag itself (an
//! atomic store is async-signal-safe), and the executor reads the flag where it already waits.
//! Nothing wakes up between signals. Tested through the binary (tests/cli: `sigint_kills_the_child_and_marks_the_run_interrupted`,
//! `sigterm_marks_the_steps_not_yet_run_skipped_not_blocked`, `ctrl_c_at_the_prompt_interrupts_the_run`): a
//! signal raised in the unit-test process would stay seen for every later test.
//!
//! A flag registered after a signal came is set at once: a command that was interrupted before its
//! run began (`do` between its review and its run) is still interrupted.
//!
//! The handlers replace the default action, so a signal no longer ends the process at once: the
//! run stops its commands, records itself interrupted and exits 130 (docs/exit-codes.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Once};

use signal_hook::consts::{SIGINT, SIGTERM};

/// Set by the first handler registered, and kept: whether a signal has come at all.
static SIGNALLED: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Installs the handler for [`SIGNALLED`] (once is enough).
static INSTALL: Once = Once::new();

/// Makes SIGINT and SIGTERM set `cancel` (see the module docs). A flag registered after a signal
/// came is set at once. When a handler cannot be installed (the signal is one the registry
/// refuses — never these two), the signal keeps its default action: it ends the process, and the
/// next start marks the run interrupted.
pub fn cancel_on_interrupt(cancel: Arc<AtomicBool>) {
    INSTALL.call_once(|| {
        for sig in [SIGINT, SIGTERM] {
            let _ = signal_hook::flag::register(sig, Arc::clone(&SIGNALLED));
        }
    });
    for sig in [SIGINT, SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&cancel));
    }
    // After registering: a signal that came before is seen here, one that comes after sets the flag
    // through its own handler.
    if SIGNALLED.load(Ordering::SeqCst) {
        cancel.store(true, Ordering::SeqCst);
    }
}
