//! The clock seam. Only the node's `Io` implements it (system time in
//! production, virtual time in the simulator); pure code takes times as
//! arguments instead.

/// Wall and monotonic time, in milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the unix epoch. May jump; used for timestamps that
    /// leave the node (timelines, `webhook-timestamp`, retry schedules).
    fn wall_ms(&self) -> u64;
    /// Milliseconds since an arbitrary origin; never goes back. Used for
    /// leases and local deadlines.
    fn monotonic_ms(&self) -> u64;
}

/// Formats unix milliseconds as RFC 3339 UTC with milliseconds,
/// e.g. `2026-12-01T05:00:00.123Z`.
pub fn format_rfc3339_ms(unix_ms: u64) -> String {
    let secs = unix_ms / 1_000;
    let ms = unix_ms % 1_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3_600, (rem % 3_600) / 60, rem % 60)
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)` into unix milliseconds.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = text.get(from..to)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let first3: String = frac[..digits].chars().chain("000".chars()).take(3).collect();
        millis = first3.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) && &rest[3..4] == ":" => {
            let h = num(text.len() - 5, text.len() - 3)?;
            let m = num(text.len() - 2, text.len())?;
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (h * 3_600 + m * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_s;
    u64::try_from(secs * 1_000 + millis).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn days_from_civil_matches_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2015, 10, 21), 16_729);
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_ms(1_614_265_330_123), "2021-02-25T15:02:10.123Z");
        assert_eq!(format_rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn parses_offsets_fractions_and_rejects_garbage() {
        assert_eq!(parse_rfc3339_ms("2021-02-25T15:02:10Z"), Some(1_614_265_330_000));
        assert_eq!(parse_rfc3339_ms("2021-02-25T16:02:10.5+01:00"), Some(1_614_265_330_500));
        assert_eq!(parse_rfc3339_ms("2021-02-25T15:02:10.123456Z"), Some(1_614_265_330_123));
        for bad in ["", "yesterday", "2021-13-01T00:00:00Z", "2021-02-25T15:02:10", "2021-02-25T15:02:10.Z"] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(ms in 0u64..253_402_300_799_999) {
            prop_assert_eq!(parse_rfc3339_ms(&format_rfc3339_ms(ms)), Some(ms));
        }
    }
}
