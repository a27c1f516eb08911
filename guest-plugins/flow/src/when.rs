//! When a label was taken, as a person reads it: `2026-12-06 14:02 UTC`.

/// `at_ms` (Unix milliseconds) as a UTC date and minute.
pub fn said(at_ms: u64) -> String {
    let secs = at_ms / 1000;
    let (days, in_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil(days as i64);
    format!(
        "at {year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        in_day / 3600,
        in_day % 3600 / 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// civil-from-days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_civil() {
        assert_eq!(super::said(0), "at 1970-01-01 00:00 UTC");
        // 2026-12-06 14:02:30 UTC.
        assert_eq!(super::said(1_796_565_750_000), "at 2026-12-06 14:02 UTC");
        assert_eq!(super::said(951_782_400_000), "at 2000-02-29 00:00 UTC");
    }
}
