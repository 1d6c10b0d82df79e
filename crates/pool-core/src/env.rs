//! Environment configuration read by pool-core: `CMF_POOL_SPIN`.

use std::fmt;

use crate::policy::SpinPolicy;

/// The variable holding the fixed spin budget.
pub const SPIN_ENV: &str = "CMF_POOL_SPIN";

/// The fixed budget of the engines this pool replaced, kept as a reference point. Measured on an M4
/// (see docs/tuning.md): 4000 spins vs parking at once took a Qwen-0.5B q4
/// decode from 117 to 149 tokens/s; 200,000 was 15 % slower than 4000
/// because spinners steal the caller's serial cycles. The default is now
/// the adaptive policy ([`SpinPolicy::adaptive`]).
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

/// Parses a `CMF_POOL_SPIN` value: `None` (unset) is the adaptive default;
/// otherwise a non-negative integer (surrounding whitespace ignored) is a
/// fixed budget, `0` parking at once.
///
/// ```
/// use pool_core::{parse_spin_policy, SpinPolicy};
/// assert_eq!(parse_spin_policy(None), Ok(SpinPolicy::adaptive()));
/// assert_eq!(parse_spin_policy(Some(" 0 ")), Ok(SpinPolicy::Fixed(0)));
/// assert!(parse_spin_policy(Some("-1")).is_err());
/// ```
pub fn parse_spin_policy(value: Option<&str>) -> Result<SpinPolicy, InvalidSpinBudget> {
    match value {
        None => Ok(SpinPolicy::adaptive()),
        Some(text) => text
            .trim()
            .parse::<usize>()
            .map(SpinPolicy::Fixed)
            .map_err(|_| InvalidSpinBudget {
                value: text.to_owned(),
            }),
    }
}

/// The spin policy from the environment. An invalid value is reported with
/// [`pool_topo::warn_env`] (naming the variable and the value; on stderr if
/// nothing else would show it) and the adaptive default is used instead:
/// never silently read as 0.
pub fn spin_policy_from_env() -> SpinPolicy {
    let raw = std::env::var_os(SPIN_ENV);
    let text = raw.as_ref().map(|v| v.to_string_lossy());
    match parse_spin_policy(text.as_deref()) {
        Ok(policy) => policy,
        Err(err) => {
            pool_topo::warn_env(
                SPIN_ENV,
                err.value(),
                format_args!("pool-core: {err}; using the adaptive spin policy"),
            );
            SpinPolicy::adaptive()
        }
    }
}
