//! Wall-clock helpers: unix seconds and milliseconds, and RFC 3339 text in UTC or the local
//! zone (its offset from the C library's `localtime_r`, which reads `TZ` and the system's
//! zone files), read back too, without a date crate (the only calendar maths needed is days to
//! a civil date and back).

use std::time::{SystemTime, UNIX_EPOCH};

pub fn unix_secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub fn unix_millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub fn now_ms() -> i64 {
    unix_millis(SystemTime::now())
}

/// `2026-11-30T08:15:24.123Z` for unix milliseconds.
pub fn rfc3339(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// `2026-11-30T05:15:24.123-03:00`: unix milliseconds in the local zone, with its offset then.
pub fn rfc3339_local(ms: i64) -> String {
    let offset = local_offset_secs(ms.div_euclid(1000));
    let utc = rfc3339(ms + offset * 1000);
    let (sign, abs) = if offset < 0 {
        ('-', -offset)
    } else {
        ('+', offset)
    };
    let zone = format!("{sign}{:02}:{:02}", abs / 3600, abs / 60 % 60);
    format!("{}{zone}", &utc[..utc.len() - 1])
}

/// The local zone's offset from UTC at unix second `secs`, in seconds (0 if unknown).
fn local_offset_secs(secs: i64) -> i64 {
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: `localtime_r` writes only into `tm`, which is ours and fully initialised.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return 0;
    }
    tm.tm_gmtoff as i64
}

/// A time given by an owner (`--since`, the status page's filters): RFC 3339 text
/// ([`parse_rfc3339`]), or a duration before `now_ms` (`90s`, `30m`, `2h`, `7d`).
pub fn parse_when(text: &str, now_ms: i64) -> Option<i64> {
    let text = text.trim();
    if let Some(ms) = parse_rfc3339(text) {
        return Some(ms);
    }
    let unit = match text.bytes().last()? {
        b's' => 1_000,
        b'm' => 60_000,
        b'h' => 3_600_000,
        b'd' => 86_400_000,
        _ => return None,
    };
    let n = &text[..text.len() - 1];
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(now_ms.saturating_sub(n.parse::<i64>().ok()?.saturating_mul(unit)))
}

/// Unix milliseconds of RFC 3339 text: `2026-11-30T08:15:24Z`, with a fraction of a second
/// and a `±HH:MM` offset if given, `t` or a space for the `T`; or a date alone, `2026-11-30`,
/// its midnight UTC.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(r)?;
        digits.iter().all(u8::is_ascii_digit).then_some(())?;
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') || !(1..=12).contains(&month) {
        return None;
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_len = [
        31,
        28 + i64::from(leap),
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if day < 1 || day > month_len[(month - 1) as usize] {
        return None;
    }
    let date_ms = days_from_civil(year, month, day) * 86_400_000;
    if b.len() == 10 {
        return Some(date_ms);
    }
    if !matches!(b.get(10), Some(b'T' | b't' | b' ')) || b.get(13) != Some(&b':') {
        return None;
    }
    let (h, m, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b.get(16) != Some(&b':') || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let n = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        let first3 = format!("{:0<3}", &fraction[..n.min(3)]);
        millis = first3.parse::<i64>().ok()?;
        rest = &fraction[n..];
    }
    let at = b.len() - rest.len();
    let offset = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let secs = num(at + 1..at + 3)? * 3600 + num(at + 4..at + 6)? * 60;
            if *sign == b'-' { -secs } else { secs }
        }
        _ => return None,
    };
    Some(date_ms + ((h * 60 + m) * 60 + s - offset) * 1000 + millis)
}

/// Howard Hinnant's (year, month, day) to days from the epoch, the inverse of
/// [`civil_from_days`].
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's days-from-epoch to (year, month, day) in the proleptic Gregorian calendar.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_614_265_330_123), "2021-02-25T15:02:10.123Z");
        assert_eq!(rfc3339(1_796_026_524_000), "2026-11-30T08:15:24.000Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn reads_rfc3339_back() {
        for ms in [0, 951_782_400_000, 1_614_265_330_123, -1] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms), "{ms}");
        }
        assert_eq!(
            parse_rfc3339("2026-11-30T05:15:24.5-03:00"),
            Some(1_796_026_524_500)
        );
        assert_eq!(
            parse_rfc3339("2026-11-30 08:15:24+00:00"),
            Some(1_796_026_524_000)
        );
        assert_eq!(parse_rfc3339("2026-11-30"), Some(1_795_996_800_000));
        for bad in [
            "",
            "2026-13-01",
            "2026-02-29",
            "2026-11-30T08:15",
            "2026-11-30T08:15:24",
            "2026-11-30T24:00:00Z",
            "2026-11-30T08:15:24.Z",
            "2026-11-30T08:15:24+0300",
            "2h",
            "２026-11-30",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        for days in -800_000..800_000 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn a_time_is_rfc3339_or_a_duration_ago() {
        let now = 1_796_026_524_000;
        assert_eq!(parse_when("2h", now), Some(now - 7_200_000));
        assert_eq!(parse_when(" 7d", now), Some(now - 7 * 86_400_000));
        assert_eq!(parse_when("90s", now), Some(now - 90_000));
        assert_eq!(parse_when("2026-11-30T08:15:24Z", 0), Some(now));
        for bad in ["", "h", "2", "-2h", "2 h", "2w", "1.5h", "yesterday"] {
            assert_eq!(parse_when(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn local_time_names_its_offset() {
        // The zone is the machine's: whatever it is, the text reads back to the instant.
        let ms = 1_796_026_524_123;
        let local = rfc3339_local(ms);
        assert_eq!(parse_rfc3339(&local), Some(ms), "{local}");
    }

    #[test]
    fn civil_from_days_matches_known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(47_540), (2100, 2, 28));
        assert_eq!(civil_from_days(47_541), (2100, 3, 1));
        assert_eq!(civil_from_days(-719_468), (0, 3, 1));
        // Round trip against a plain day-by-day walk over several 400-year cycles.
        let (mut y, mut m, mut d) = (1900i64, 1i64, 1i64);
        for days in -25_567..=200_000 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let month_len = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            d += 1;
            if d > month_len[(m - 1) as usize] {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
