//! The retry policy for transient failures (SPEC §4.5): exponential backoff, 1 s, 2 s, 4 s by
//! default, honouring a server's `Retry-After` up to a cap. Used for LLM calls and for tool calls
//! marked retryable, so it knows nothing about either: callers pass the number of the attempt that
//! failed and any delay the failure asked for, and sleep (interruptibly) for what it returns.

use std::time::Duration;

/// How often and how long to wait before retrying a transient failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Retries after the first attempt (so `retries + 1` attempts in all). Default 3.
    pub retries: u32,
    /// The first delay; each later one doubles it. Default 1 s.
    pub base: Duration,
    /// Upper bound on any delay, including one asked for by `Retry-After`. Default 60 s.
    pub max_retry_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            retries: 3,
            base: Duration::from_secs(1),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// A policy with `retries` retries starting at `base`, delays capped at `max_retry_after`.
    pub fn new(retries: u32, base: Duration, max_retry_after: Duration) -> Self {
        Backoff {
            retries,
            base,
            max_retry_after,
        }
    }

    /// Never retry: for `retries: 0` in a plan, and for tests that want the first error.
    pub fn none() -> Self {
        Backoff {
            retries: 0,
            ..Backoff::default()
        }
    }

    /// The default shape with every duration scaled to `unit` instead of one second (base `unit`,
    /// cap `60 × unit`), so tests can exercise the schedule in milliseconds.
    pub fn scaled(retries: u32, unit: Duration) -> Self {
        Backoff {
            retries,
            base: unit,
            max_retry_after: unit.saturating_mul(60),
        }
    }

    /// A copy with a different retry count (a step's `retries` setting).
    pub fn with_retries(self, retries: u32) -> Self {
        Backoff { retries, ..self }
    }

    /// How long to wait after failed attempt number `attempt` (1-based) before trying again, or
    /// `None` when no retries remain. `retry_after` (a server's request) replaces the exponential
    /// delay; every delay is capped at `max_retry_after` so a hostile server cannot stall a run.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
        let attempt = attempt.max(1);
        if attempt > self.retries {
            return None;
        }
        let delay = match retry_after {
            Some(asked) => asked,
            None => {
                let factor = 1u32.checked_shl(attempt - 1).unwrap_or(u32::MAX);
                self.base.saturating_mul(factor)
            }
        };
        Some(delay.min(self.max_retry_after))
    }

    /// Total attempts this policy allows (first try plus retries).
    pub fn max_attempts(&self) -> u32 {
        self.retries.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn default_sequence_is_1_2_4_then_none() {
        let b = Backoff::default();
        assert_eq!(b.delay(1, None), Some(S(1)));
        assert_eq!(b.delay(2, None), Some(S(2)));
        assert_eq!(b.delay(3, None), Some(S(4)));
        assert_eq!(b.delay(4, None), None);
        assert_eq!(b.max_attempts(), 4);
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let b = Backoff::default();
        assert_eq!(b.delay(1, Some(S(7))), Some(S(7)));
        assert_eq!(b.delay(2, Some(Duration::ZERO)), Some(Duration::ZERO));
        assert_eq!(b.delay(1, Some(S(3600))), Some(S(60)));
        // No retries left: Retry-After does not grant one.
        assert_eq!(b.delay(4, Some(S(1))), None);
    }

    #[test]
    fn exponential_growth_is_capped_and_never_overflows() {
        let b = Backoff::default().with_retries(100);
        assert_eq!(b.delay(7, None), Some(S(60)));
        assert_eq!(b.delay(40, None), Some(S(60)));
        assert_eq!(b.delay(100, None), Some(S(60)));
        assert_eq!(b.delay(101, None), None);
    }

    #[test]
    fn none_and_scaled() {
        assert_eq!(Backoff::none().delay(1, None), None);
        let fast = Backoff::scaled(3, Duration::from_millis(1));
        assert_eq!(fast.delay(1, None), Some(Duration::from_millis(1)));
        assert_eq!(fast.delay(3, None), Some(Duration::from_millis(4)));
        assert_eq!(fast.delay(1, Some(S(1))), Some(Duration::from_millis(60)));
        assert_eq!(fast.delay(4, None), None);
        // Attempt 0 is treated as the first failure rather than panicking.
        assert_eq!(Backoff::default().delay(0, None), Some(S(1)));
    }
}
