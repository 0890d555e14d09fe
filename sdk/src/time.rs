//! UTC calendar arithmetic for plugins: Unix milliseconds to and from dates, and ISO 8601 parsing.
//! Small and dependency-free, proleptic Gregorian calendar.

/// A UTC date and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDateTime {
    /// The year, e.g. 2024.
    pub year: i32,
    /// 1 to 12.
    pub month: u32,
    /// 1 to 31.
    pub day: u32,
    /// 0 to 23.
    pub hour: u32,
    /// 0 to 59.
    pub minute: u32,
    /// 0 to 59.
    pub second: u32,
    /// 0 to 999.
    pub millisecond: u32,
}

const MS_PER_DAY: i64 = 86_400_000;

impl UtcDateTime {
    /// The date and time `ms` milliseconds after the Unix epoch.
    pub fn from_unix_ms(ms: i64) -> Self {
        let days = ms.div_euclid(MS_PER_DAY);
        let rem = ms.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        UtcDateTime {
            year,
            month,
            day,
            hour: (rem / 3_600_000) as u32,
            minute: (rem / 60_000 % 60) as u32,
            second: (rem / 1000 % 60) as u32,
            millisecond: (rem % 1000) as u32,
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn to_unix_ms(&self) -> i64 {
        days_from_civil(self.year, self.month, self.day) * MS_PER_DAY
            + i64::from(self.hour) * 3_600_000
            + i64::from(self.minute) * 60_000
            + i64::from(self.second) * 1000
            + i64::from(self.millisecond)
    }

    /// Days since the Unix epoch of this date (the time of day ignored).
    pub fn days_since_epoch(&self) -> i64 {
        days_from_civil(self.year, self.month, self.day)
    }

    /// Parses an ISO 8601 / RFC 3339 date (`2024-02-29`) or date-time (`2024-02-29T10:30:00Z`,
    /// `2024-02-29 10:30:00.5+02:00`, no offset meaning UTC), converted to UTC.
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim().as_bytes();
        let num = |s: &[u8]| -> Option<u32> {
            if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
                return None;
            }
            std::str::from_utf8(s).ok()?.parse().ok()
        };
        if t.len() < 10 || t[4] != b'-' || t[7] != b'-' {
            return None;
        }
        let year = i32::try_from(num(&t[0..4])?).ok()?;
        let month = num(&t[5..7])?;
        let day = num(&t[8..10])?;
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        let mut dt = UtcDateTime { year, month, day, hour: 0, minute: 0, second: 0, millisecond: 0 };
        let rest = &t[10..];
        if rest.is_empty() {
            return Some(dt);
        }
        if !matches!(rest[0], b'T' | b't' | b' ') || rest.len() < 6 || rest[3] != b':' {
            return None;
        }
        dt.hour = num(&rest[1..3])?;
        dt.minute = num(&rest[4..6])?;
        let mut i = 6;
        if rest.len() >= 9 && rest[6] == b':' {
            dt.second = num(&rest[7..9])?;
            i = 9;
            if rest.len() > i && (rest[i] == b'.' || rest[i] == b',') {
                let start = i + 1;
                let mut end = start;
                while end < rest.len() && rest[end].is_ascii_digit() {
                    end += 1;
                }
                if end == start {
                    return None;
                }
                let mut frac = rest[start..end.min(start + 3)].to_vec();
                frac.resize(3, b'0');
                dt.millisecond = num(&frac)?;
                i = end;
            }
        }
        if dt.hour > 23 || dt.minute > 59 || dt.second > 60 {
            return None;
        }
        dt.second = dt.second.min(59);
        let offset_minutes: i64 = match &rest[i..] {
            [] | [b'Z'] | [b'z'] => 0,
            [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] | [sign @ (b'+' | b'-'), h1, h2, m1, m2] => {
                let h = i64::from(num(&[*h1, *h2])?);
                let m = i64::from(num(&[*m1, *m2])?);
                if h > 23 || m > 59 {
                    return None;
                }
                if *sign == b'+' { h * 60 + m } else { -(h * 60 + m) }
            }
            _ => return None,
        };
        Some(UtcDateTime::from_unix_ms(dt.to_unix_ms() - offset_minutes * 60_000))
    }

    /// `YYYYMMDD'T'HHMMSS'Z'`, the basic ISO 8601 form (as AWS Signature Version 4 uses it).
    pub fn to_basic_iso8601(&self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `YYYY-MM-DDTHH:MM:SS.sssZ`.
    pub fn to_rfc3339(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millisecond
        )
    }
}

/// Whether `year` has a 29th of February.
pub fn is_leap_year(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// The number of days in `month` (1 to 12) of `year`; 0 for an invalid month.
pub fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of a date (Howard Hinnant's `days_from_civil`).
pub fn days_from_civil(year: i32, month: u32, day: u32) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` days after 1970-01-01, as `(year, month, day)` (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i32, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        let dt = UtcDateTime::from_unix_ms(1_440_938_160_000);
        assert_eq!(dt.to_basic_iso8601(), "20150830T123600Z");
        assert_eq!(dt.to_unix_ms(), 1_440_938_160_000);
    }

    #[test]
    fn round_trips_every_day_for_a_few_centuries() {
        for d in -100_000..100_000 {
            let (y, m, day) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, day), d);
        }
    }

    #[test]
    fn parses_iso_dates() {
        let p = |s: &str| UtcDateTime::parse(s).map(|d| d.to_rfc3339());
        assert_eq!(p("2024-02-29").as_deref(), Some("2024-02-29T00:00:00.000Z"));
        assert_eq!(p("2024-02-29T10:30:00Z").as_deref(), Some("2024-02-29T10:30:00.000Z"));
        assert_eq!(p("2024-02-29T10:30:00.25+02:00").as_deref(), Some("2024-02-29T08:30:00.250Z"));
        assert_eq!(p("2024-01-01T00:30-01:00").as_deref(), Some("2024-01-01T01:30:00.000Z"));
        assert_eq!(p("2024-03-01 00:00:00+0100").as_deref(), Some("2024-02-29T23:00:00.000Z"));
        for bad in ["", "2023-02-29", "2024-13-01", "2024-1-01", "2024-01-01T25:00", "2024-01-01X", "hello"] {
            assert_eq!(UtcDateTime::parse(bad), None, "{bad}");
        }
    }
}
