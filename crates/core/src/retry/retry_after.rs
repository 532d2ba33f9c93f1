//! The `Retry-After` header: delta seconds or an HTTP date (IMF-fixdate).

use crate::clock::days_from_civil;

/// Parses a `Retry-After` value (delta seconds or IMF-fixdate) into a delay.
///
/// A date in the past gives `Some(0)`. Obsolete HTTP date formats (RFC 850,
/// asctime), negative or overflowing numbers give `None`.
pub fn parse_retry_after(value: &str, now_ms: u64) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds: u64 = value.parse().ok()?;
        return Some(seconds.saturating_mul(1000));
    }
    let date_ms = parse_imf_fixdate_ms(value)?;
    Some(date_ms.saturating_sub(now_ms))
}

pub(super) const DAY_NAMES: [&str; 7] = ["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"];
pub(super) const MONTH_NAMES: [&str; 12] =
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// `Wed, 21 Oct 2015 07:28:00 GMT` → milliseconds since the unix epoch.
/// Dates before 1970 clamp to 0. The day name is checked for form only.
pub(super) fn parse_imf_fixdate_ms(text: &str) -> Option<u64> {
    let fields: Vec<&str> = text.split(' ').collect();
    let [day_name, day, month, year, time, "GMT"] = fields.as_slice() else {
        return None;
    };
    if !DAY_NAMES.contains(day_name) {
        return None;
    }
    let day = fixed_digits(day, 2)?;
    let month = MONTH_NAMES.iter().position(|m| m == month)? as u32 + 1;
    let year = fixed_digits(year, 4)?;
    if day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let clock: Vec<&str> = time.split(':').collect();
    let [hour, minute, second] = clock.as_slice() else {
        return None;
    };
    let (hour, minute, second) = (fixed_digits(hour, 2)?, fixed_digits(minute, 2)?, fixed_digits(second, 2)?);
    // 60 is a leap second, which RFC 9110 allows.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let seconds = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Some(u64::try_from(seconds).unwrap_or(0).saturating_mul(1000))
}

/// Exactly `width` ASCII digits.
fn fixed_digits(text: &str, width: usize) -> Option<u32> {
    if text.len() != width || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}
