//! Environment configuration read by pool-core: `CMF_POOL_SPIN`.

use std::fmt;

/// The variable holding the fixed spin budget.
pub const SPIN_ENV: &str = "CMF_POOL_SPIN";

/// Spin budget used when `CMF_POOL_SPIN` is unset or invalid. Measured on
/// an M4 (see docs/tuning.md): 4000 spins vs parking at once took a
/// Qwen-0.5B q4 decode from 117 to 149 tokens/s; 200,000 was 15 % slower
/// than 4000 because spinners steal the caller's serial cycles.
pub const DEFAULT_SPIN_BUDGET: usize = 4000;

/// A `CMF_POOL_SPIN` value that is not a non-negative integer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSpinBudget {
    value: String,
}

impl InvalidSpinBudget {
    /// The rejected text, exactly as found in the environment.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Display for InvalidSpinBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SPIN_ENV}={:?} is not a non-negative integer spin count",
            self.value
        )
    }
}

impl std::error::Error for InvalidSpinBudget {}

/// Parses a `CMF_POOL_SPIN` value: `None` (unset) is the default, surrounding
/// whitespace is ignored, anything else must be a non-negative integer.
///
/// ```
/// use pool_core::{parse_spin_budget, DEFAULT_SPIN_BUDGET};
/// assert_eq!(parse_spin_budget(None), Ok(DEFAULT_SPIN_BUDGET));
/// assert_eq!(parse_spin_budget(Some(" 0 ")), Ok(0));
/// assert!(parse_spin_budget(Some("-1")).is_err());
/// ```
pub fn parse_spin_budget(value: Option<&str>) -> Result<usize, InvalidSpinBudget> {
    match value {
        None => Ok(DEFAULT_SPIN_BUDGET),
        Some(text) => text.trim().parse::<usize>().map_err(|_| InvalidSpinBudget {
            value: text.to_owned(),
        }),
    }
}

/// The spin budget from the environment. An invalid value is reported with
/// `tracing::warn!` (naming the variable and the value) and the default is
/// used instead: never silently read as 0.
pub fn spin_budget_from_env() -> usize {
    let raw = std::env::var_os(SPIN_ENV);
    let text = raw.as_ref().map(|v| v.to_string_lossy());
    match parse_spin_budget(text.as_deref()) {
        Ok(spins) => spins,
        Err(err) => {
            tracing::warn!(
                variable = SPIN_ENV,
                value = err.value(),
                default = DEFAULT_SPIN_BUDGET,
                "{err}; using the default spin budget"
            );
            DEFAULT_SPIN_BUDGET
        }
    }
}
