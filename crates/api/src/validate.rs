//! Validation of endpoint settings sent by callers; each failure names the
//! field and the accepted range.

use hookraft_core::model::{
    EVENT_TYPE_BYTES_MAX, EVENT_TYPES_MAX, MAX_IN_FLIGHT_LIMIT, RATE_LIMIT_PER_S_MAX, TIMEOUT_MS_MAX, TIMEOUT_MS_MIN,
};
use hookraft_core::retry::RetryPolicy;
use serde::{Deserialize, Deserializer};

use crate::problem::Problem;

/// Longest endpoint description.
pub const DESCRIPTION_CHARS_MAX: usize = 1_024;

/// `retry` as sent: every field optional, defaults fill the rest.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryInput {
    /// Attempts in one cycle before the delivery is dead-lettered; default 18.
    #[schema(minimum = 1, maximum = 100)]
    pub attempts_max: Option<u32>,
    /// Backoff base, at least 1 and at most `cap_ms`; default 5000.
    #[schema(minimum = 1)]
    pub base_ms: Option<u64>,
    /// Backoff ceiling, at most 604800000 (7 days); default 28800000.
    #[schema(maximum = 604800000)]
    pub cap_ms: Option<u64>,
    /// Dead-letter instead of retrying past this age of the cycle; default 259200.
    #[schema(minimum = 1, maximum = 2592000)]
    pub max_age_s: Option<u64>,
    /// The longest wait a `Retry-After` may set (0 ignores it); default 3600000.
    #[schema(maximum = 604800000)]
    pub retry_after_max_ms: Option<u64>,
}

impl RetryInput {
    pub fn into_policy(self) -> Result<RetryPolicy, Problem> {
        let d = RetryPolicy::default();
        let policy = RetryPolicy {
            attempts_max: self.attempts_max.unwrap_or(d.attempts_max),
            base_ms: self.base_ms.unwrap_or(d.base_ms),
            cap_ms: self.cap_ms.unwrap_or(d.cap_ms.max(self.base_ms.unwrap_or(0))),
            max_age_s: self.max_age_s.unwrap_or(d.max_age_s),
            retry_after_max_ms: self.retry_after_max_ms.unwrap_or(d.retry_after_max_ms),
        };
        policy.validate().map_err(Problem::invalid)?;
        Ok(policy)
    }
}

/// Distinguishes an absent field (`None`) from an explicit `null` (`Some(None)`).
pub fn double_option<'de, T: Deserialize<'de>, D: Deserializer<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

pub fn url(url: &str, allow_private: bool) -> Result<String, Problem> {
    hookraft_delivery::ssrf::validate_target_url(url, allow_private)
        .map(|u| u.to_string())
        .map_err(|e| Problem::invalid(format!("url: {e}")))
}

pub fn event_types(types: &[String]) -> Result<(), Problem> {
    if types.len() > EVENT_TYPES_MAX {
        return Err(Problem::invalid(format!("event_types may list at most {EVENT_TYPES_MAX} types")));
    }
    types.iter().try_for_each(|t| event_type(t).map_err(|p| Problem::invalid(format!("event_types: {}", p.detail))))
}

pub fn event_type(t: &str) -> Result<(), Problem> {
    if t.is_empty() || t.len() > EVENT_TYPE_BYTES_MAX || t.chars().any(char::is_control) {
        return Err(Problem::invalid(format!(
            "type must be 1 to {EVENT_TYPE_BYTES_MAX} bytes without control characters"
        )));
    }
    Ok(())
}

pub fn max_in_flight(n: u32) -> Result<u32, Problem> {
    in_range("max_in_flight", n, 1, MAX_IN_FLIGHT_LIMIT)
}

pub fn rate_limit(n: u32) -> Result<u32, Problem> {
    in_range("rate_limit_per_s", n, 1, RATE_LIMIT_PER_S_MAX)
}

pub fn timeout_ms(n: u32) -> Result<u32, Problem> {
    in_range("timeout_ms", n, TIMEOUT_MS_MIN, TIMEOUT_MS_MAX)
}

pub fn description(d: &str) -> Result<(), Problem> {
    if d.chars().count() > DESCRIPTION_CHARS_MAX {
        return Err(Problem::invalid(format!("description may be at most {DESCRIPTION_CHARS_MAX} characters")));
    }
    Ok(())
}

fn in_range(field: &str, n: u32, min: u32, max: u32) -> Result<u32, Problem> {
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(Problem::invalid(format!("{field} must be between {min} and {max}, got {n}")))
    }
}

/// Longest grace period a secret rotation may ask for.
pub const GRACE_PERIOD_S_MAX: u64 = 7 * 24 * 3_600;

/// A rotation's `grace_period_s` in ms: `default_ms` when absent, at most
/// [`GRACE_PERIOD_S_MAX`].
pub fn grace_ms(grace_period_s: Option<u64>, default_ms: u64) -> Result<u64, Problem> {
    match grace_period_s {
        Some(s) if s > GRACE_PERIOD_S_MAX => {
            Err(Problem::invalid(format!("grace_period_s may be at most {GRACE_PERIOD_S_MAX}")))
        }
        Some(s) => Ok(s * 1_000),
        None => Ok(default_ms),
    }
}

/// A listing's `state` filter.
pub fn delivery_state(text: &str) -> Result<hookraft_core::model::DeliveryState, Problem> {
    hookraft_core::model::DeliveryState::parse(text).ok_or_else(|| {
        Problem::malformed(format!(
            "state must be pending, attempting, retrying, delivered, dead or ignored_stale, got `{text}`"
        ))
    })
}

/// A listing's `limit`: `default` when absent, else 1 to `max`.
pub fn page_limit(text: Option<&str>, default: usize, max: usize) -> Result<usize, Problem> {
    match text {
        None => Ok(default),
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=max).contains(l))
            .ok_or_else(|| Problem::malformed(format!("limit must be between 1 and {max}, got `{l}`"))),
    }
}

/// A listing's `cursor`: the `next_cursor` of the page before; absent or
/// empty is the first page.
pub fn page_cursor<T: std::str::FromStr>(text: Option<&str>) -> Result<Option<T>, Problem> {
    match text {
        None | Some("") => Ok(None),
        Some(c) => c.parse().map(Some).map_err(|_| Problem::malformed("cursor: pass back a next_cursor value")),
    }
}

/// A time in a query (`since`, `until`), RFC 3339.
pub fn query_time(field: &str, text: Option<&str>) -> Result<Option<u64>, Problem> {
    text.map(|v| {
        hookraft_core::clock::parse_rfc3339_ms(v)
            .ok_or_else(|| Problem::malformed(format!("{field}: `{v}` is not an RFC 3339 time")))
    })
    .transpose()
}

/// An id in a query (`endpoint_id`, `event_id`).
pub fn query_id<T: std::str::FromStr<Err = hookraft_core::ids::IdParseError>>(
    field: &str,
    text: Option<&str>,
) -> Result<Option<T>, Problem> {
    text.map(|t| t.parse().map_err(|e| Problem::malformed(format!("{field}: {e}")))).transpose()
}
