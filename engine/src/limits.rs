//! The run limits of contract §9, with their defaults and validation.

use std::time::Duration;

use dsh_protocol::ErrorCode;

/// The longest a script may keep running synchronously after a cancel
/// before the worker interrupts it. A spinning script cannot observe the
/// cancel anyway (hooks throw `CANCELLED` as soon as it calls one), so
/// waiting longer buys nothing and delays the settle; one millisecond lets
/// a script that reacts to `CANCELLED` unwind on its own (a catch, a
/// finally) and stops one that spins.
pub const CANCEL_INTERRUPT_MAX: Duration = Duration::from_millis(1);

/// The deepest nesting of arrays and objects dsh keeps in `args` and in a
/// return value: a run directory stores them two levels down (`run.json`'s
/// `args.json`, `result.json`'s `result.value`), and every JSON reader
/// here stops at 128 levels, so anything deeper could be run but never
/// read back by `show`, `runs` or `resume`.
pub const MAX_JSON_DEPTH: usize = 125;

/// How deeply `v` nests arrays and objects (a scalar is 0, `[]` is 1).
/// Iterative: a value of any depth is measured without recursion.
pub fn json_depth(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Array(a) => {
                deepest = deepest.max(depth + 1);
                stack.extend(a.iter().map(|x| (x, depth + 1)));
            }
            Value::Object(m) => {
                deepest = deepest.max(depth + 1);
                stack.extend(m.values().map(|x| (x, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Ceiling for `max_total_agents` unless configured otherwise.
pub const DEFAULT_MAX_TOTAL_AGENTS: u32 = 1000;

/// Limits of one run. `Limits::default()` is the contract's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// `agent()` calls running at once; later ones wait for a slot
    /// (default 16).
    pub max_concurrent_agents: u32,
    /// `agent()` calls per run; one more fails with `AGENT_CAP` (default
    /// [`DEFAULT_MAX_TOTAL_AGENTS`]).
    pub max_total_agents: u32,
    /// The configured ceiling `max_total_agents` may not exceed.
    pub max_total_agents_ceiling: u32,
    /// Items in one `parallel`/`pipeline` call; more fail with `ITEM_CAP`
    /// (default 4096).
    pub max_items_per_call: u32,
    /// The longest synchronous slice of script code before `TIMEOUT`
    /// (default 30 s).
    pub sync_timeout: Duration,
    /// The largest script source accepted, in bytes (default 1 MiB).
    pub max_script_bytes: usize,
    /// Time from a cancel to the forced settle and kill of the worker
    /// (default 5 s).
    pub dispose_grace: Duration,
    /// The wall-clock budget of the whole run; when it runs out the run is
    /// cancelled with `TIMEOUT`. `None` (the default) is no limit.
    pub wall_timeout: Option<Duration>,
    /// The CPU time the script may use (`TIMEOUT`); `None` (the default) is
    /// no limit.
    pub compute: Option<Duration>,
    /// The script heap's limit in bytes (`MEMORY`); at least 1 MiB
    /// (default 256 MiB).
    pub memory_bytes: u64,
    /// Log text per run, in bytes; later lines are dropped and counted
    /// (default 1 MiB).
    pub log_bytes: u64,
    /// Output-token budget (`budget.total`); `None` is unlimited.
    pub budget_tokens: Option<u64>,
    /// Cost budget in US dollars: what the run's children may cost
    /// together, as they report it (agent CLIs); `None` is unlimited.
    /// Enforced by the host ([`crate::cost::CostBudget`]).
    pub budget_usd: Option<f64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrent_agents: 16,
            max_total_agents: DEFAULT_MAX_TOTAL_AGENTS,
            max_total_agents_ceiling: DEFAULT_MAX_TOTAL_AGENTS,
            max_items_per_call: 4096,
            sync_timeout: Duration::from_secs(30),
            max_script_bytes: 1024 * 1024,
            dispose_grace: Duration::from_secs(5),
            wall_timeout: None,
            compute: None,
            memory_bytes: 256 * 1024 * 1024,
            log_bytes: 1024 * 1024,
            budget_tokens: None,
            budget_usd: None,
        }
    }
}

/// An invalid limit: names the knob and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{knob}: {message}")]
pub struct LimitError {
    /// The limit, as the contract spells it (`maxConcurrentAgents`,
    /// `syncTimeoutMs` …).
    pub knob: &'static str,
    /// What is wrong with its value and how to fix it.
    pub message: String,
}

impl LimitError {
    /// The error code of an invalid limit: always `USAGE`.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::Usage
    }
}

impl Limits {
    /// Checks every knob; invalid values are errors, never silent clamps.
    pub fn validate(&self) -> Result<(), LimitError> {
        let err = |knob, message: String| Err(LimitError { knob, message });
        if self.max_concurrent_agents == 0 {
            return err(
                "maxConcurrentAgents",
                "must be at least 1 (0 would never start an agent)".into(),
            );
        }
        if self.max_total_agents > self.max_total_agents_ceiling {
            return err(
                "maxTotalAgents",
                format!(
                    "{} is above the configured ceiling of {}; lower it (a caller may lower, never raise, the ceiling)",
                    self.max_total_agents, self.max_total_agents_ceiling
                ),
            );
        }
        if self.max_items_per_call == 0 {
            return err("maxItemsPerCall", "must be at least 1".into());
        }
        if self.sync_timeout.is_zero() {
            return err("syncTimeoutMs", "must be greater than 0".into());
        }
        if self.max_script_bytes == 0 {
            return err("maxScriptBytes", "must be greater than 0".into());
        }
        if let Some(b) = self.budget_usd
            && !(b.is_finite() && b > 0.0)
        {
            return err(
                "budgetUsd",
                format!("{b} is not a positive amount of US dollars"),
            );
        }
        if self.wall_timeout.is_some_and(|d| d.is_zero()) {
            return err("wallTimeoutMs", "must be greater than 0 when set".into());
        }
        if self.compute.is_some_and(|d| d.is_zero()) {
            return err("computeMs", "must be greater than 0 when set".into());
        }
        // These three cross the wire and `run.json` in whole milliseconds:
        // a non-zero value under 1ms would become 0 there (the worker's
        // slice budget, and a limit `resume` then refuses).
        for (knob, d) in [
            ("syncTimeoutMs", Some(self.sync_timeout)),
            ("wallTimeoutMs", self.wall_timeout),
            ("computeMs", self.compute),
        ] {
            if let Some(d) = d
                && millis(d) == 0
            {
                return err(
                    knob,
                    format!("{d:?} is under 1ms; limits are whole milliseconds, use at least 1ms"),
                );
            }
        }
        if self.memory_bytes < 1024 * 1024 {
            return err("memoryBytes", "must be at least 1 MiB".into());
        }
        Ok(())
    }

    /// How long after a cancel a script still spinning is interrupted inside
    /// the worker: a fraction of the grace, so the in-process stop comes well
    /// before the host's kill.
    pub fn cancel_interrupt(&self) -> Duration {
        (self.dispose_grace / 4).min(CANCEL_INTERRUPT_MAX)
    }

    pub(crate) fn to_wire(&self) -> dsh_protocol::Limits {
        dsh_protocol::Limits {
            max_concurrent_agents: self.max_concurrent_agents,
            max_total_agents: self.max_total_agents,
            max_items_per_call: self.max_items_per_call,
            sync_timeout_ms: millis(self.sync_timeout),
            budget_tokens: self.budget_tokens,
            memory_bytes: self.memory_bytes,
            compute_ms: self.compute.map(millis),
            log_bytes: self.log_bytes,
            cancel_interrupt_ms: millis(self.cancel_interrupt()),
        }
    }
}

/// `d` in whole milliseconds, saturating (as limits and run files spell it).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_depth_counts_nesting_without_recursion() {
        use serde_json::json;
        assert_eq!(json_depth(&json!(1)), 0);
        assert_eq!(json_depth(&json!([])), 1);
        assert_eq!(json_depth(&json!({"a": [1, {"b": []}]})), 4);
        let mut v = json!(0);
        for _ in 0..10_000 {
            v = serde_json::Value::Array(vec![v]);
        }
        assert_eq!(json_depth(&v), 10_000);
        // Dropping a Value this deep recurses in serde_json; keep it.
        std::mem::forget(v);
    }
    use rstest::rstest;

    #[test]
    fn defaults_are_valid() {
        Limits::default().validate().expect("defaults");
    }

    /// A duration under 1ms passed the zero checks, then went to the worker
    /// and into `run.json` as 0 ms, so `resume` refused the run it had
    /// started. Found by the `config` fuzz target (`sync_timeout = 0.0001`
    /// in dsh.toml; fuzz/corpus/config/regress-sub-millisecond).
    #[rstest]
    #[case::sync(Limits { sync_timeout: Duration::from_micros(100), ..Limits::default() }, "syncTimeoutMs")]
    #[case::wall(Limits { wall_timeout: Some(Duration::from_micros(999)), ..Limits::default() }, "wallTimeoutMs")]
    #[case::compute(Limits { compute: Some(Duration::from_nanos(1)), ..Limits::default() }, "computeMs")]
    fn sub_millisecond_durations_are_refused(#[case] limits: Limits, #[case] knob: &str) {
        let e = limits.validate().expect_err("under 1ms");
        assert_eq!(e.knob, knob);
        assert!(e.message.contains("at least 1ms"), "{}", e.message);
        // 1ms itself is fine (and survives run.json: dsh-journal's rundir
        // tests).
        let ok = Limits {
            sync_timeout: Duration::from_millis(1),
            wall_timeout: limits.wall_timeout.map(|_| Duration::from_millis(1)),
            compute: limits.compute.map(|_| Duration::from_millis(1)),
            ..Limits::default()
        };
        ok.validate().expect("1ms");
    }

    #[rstest]
    #[case::zero_concurrency(Limits { max_concurrent_agents: 0, ..Limits::default() }, "maxConcurrentAgents")]
    #[case::above_ceiling(Limits { max_total_agents: 1001, ..Limits::default() }, "maxTotalAgents")]
    #[case::zero_items(Limits { max_items_per_call: 0, ..Limits::default() }, "maxItemsPerCall")]
    #[case::zero_sync(Limits { sync_timeout: Duration::ZERO, ..Limits::default() }, "syncTimeoutMs")]
    #[case::zero_wall(Limits { wall_timeout: Some(Duration::ZERO), ..Limits::default() }, "wallTimeoutMs")]
    fn invalid_limits_name_the_knob(#[case] limits: Limits, #[case] knob: &str) {
        assert_eq!(limits.validate().expect_err("invalid").knob, knob);
    }

    #[test]
    fn a_caller_may_lower_the_agent_cap() {
        let l = Limits {
            max_total_agents: 3,
            ..Limits::default()
        };
        l.validate().expect("lower is fine");
    }
}
