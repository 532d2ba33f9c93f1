//! The `Retry-After` header: delta seconds or an HTTP date.

use std::time::UNIX_EPOCH;

/// Parses a `Retry-After` value (delta seconds or an HTTP date) into a delay.
///
/// HTTP dates are read by `httpdate` in the three forms RFC 9110 §5.6.7 asks
/// a recipient to accept (IMF-fixdate, and the obsolete RFC 850 and asctime
/// forms). A date in the past gives `Some(0)`; a date before 1970, a
/// negative or overflowing number, or anything else gives `None`.
pub fn parse_retry_after(value: &str, now_ms: u64) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds: u64 = value.parse().ok()?;
        return Some(seconds.saturating_mul(1000));
    }
    let date_ms = parse_http_date_ms(value)?;
    Some(date_ms.saturating_sub(now_ms))
}

/// An HTTP date as milliseconds since the unix epoch.
pub(super) fn parse_http_date_ms(text: &str) -> Option<u64> {
    let at = httpdate::parse_http_date(text).ok()?;
    let since_epoch = at.duration_since(UNIX_EPOCH).ok()?;
    u64::try_from(since_epoch.as_millis()).ok()
}
