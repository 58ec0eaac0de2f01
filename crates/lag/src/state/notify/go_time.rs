//! Times as Go writes them, for Burrow's templates: `time.Time`'s default
//! form (`2006-01-02 15:04:05.999999999 -0700 MST`) and `Format` with a Go
//! layout, in UTC. Pure.

/// Days since 1970-01-01 as (year, month, day) (the proleptic Gregorian
/// calendar; Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

struct Parts {
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    nanos: i64,
    weekday: usize,
}

fn parts(ms: i64) -> Parts {
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil(days);
    Parts {
        year,
        month,
        day,
        hour: in_day / 3_600_000,
        minute: in_day / 60_000 % 60,
        second: in_day / 1000 % 60,
        nanos: in_day % 1000 * 1_000_000,
        // 1970-01-01 was a Thursday.
        weekday: (days + 4).rem_euclid(7) as usize,
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// `ms` (since the epoch) as Go's `time.Time.String()` writes a UTC time.
pub(crate) fn go_time_string(ms: i64) -> String {
    let p = parts(ms);
    let fraction = if p.nanos == 0 { String::new() } else { format!(".{:03}", p.nanos / 1_000_000) };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}{fraction} +0000 UTC",
        p.year, p.month, p.day, p.hour, p.minute, p.second
    )
}

/// `ms` formatted with Go's reference-time layout (`2006-01-02 15:04:05`,
/// `Jan`, `Mon`, `PM`, `MST`, `Z07:00`, `.000`…), in UTC.
pub(crate) fn format_layout(ms: i64, layout: &str) -> String {
    let p = parts(ms);
    let month = MONTHS[(p.month as usize).saturating_sub(1) % 12];
    let hour12 = if p.hour % 12 == 0 { 12 } else { p.hour % 12 };
    // Longest first, where one token begins another.
    let tokens: [(&str, String); 27] = [
        ("January", month.to_owned()),
        ("Monday", DAYS[p.weekday].to_owned()),
        ("Z07:00", "Z".to_owned()),
        ("-07:00", "+00:00".to_owned()),
        ("-0700", "+0000".to_owned()),
        ("2006", format!("{:04}", p.year)),
        (".000000000", format!(".{:09}", p.nanos)),
        (".000000", format!(".{:06}", p.nanos / 1000)),
        (".000", format!(".{:03}", p.nanos / 1_000_000)),
        ("Jan", month[..3].to_owned()),
        ("Mon", DAYS[p.weekday][..3].to_owned()),
        ("MST", "UTC".to_owned()),
        ("01", format!("{:02}", p.month)),
        ("02", format!("{:02}", p.day)),
        ("_2", format!("{:>2}", p.day)),
        ("15", format!("{:02}", p.hour)),
        ("03", format!("{hour12:02}")),
        ("04", format!("{:02}", p.minute)),
        ("05", format!("{:02}", p.second)),
        ("06", format!("{:02}", p.year.rem_euclid(100))),
        ("PM", if p.hour >= 12 { "PM" } else { "AM" }.to_owned()),
        ("pm", if p.hour >= 12 { "pm" } else { "am" }.to_owned()),
        ("1", p.month.to_string()),
        ("2", p.day.to_string()),
        ("3", hour12.to_string()),
        ("4", p.minute.to_string()),
        ("5", p.second.to_string()),
    ];
    let mut out = String::new();
    let mut rest = layout;
    'outer: while !rest.is_empty() {
        for (token, value) in &tokens {
            if let Some(after) = rest.strip_prefix(token) {
                out.push_str(value);
                rest = after;
                continue 'outer;
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_layouts_in_utc() {
        let ms = 1_700_000_000_123; // 2023-11-14T22:13:20.123Z, a Tuesday
        assert_eq!(format_layout(ms, "2006-01-02T15:04:05.000Z07:00"), "2023-11-14T22:13:20.123Z");
        assert_eq!(format_layout(ms, "Mon Jan _2 3:04PM MST 06"), "Tue Nov 14 10:13PM UTC 23");
        assert_eq!(format_layout(ms, "Monday, January 2"), "Tuesday, November 14");
        assert_eq!(go_time_string(ms), "2023-11-14 22:13:20.123 +0000 UTC");
        assert_eq!(format_layout(0, "2006-01-02 15:04:05 -0700"), "1970-01-01 00:00:00 +0000");
        assert_eq!(format_layout(-86_400_000, "2006-01-02"), "1969-12-31");
        assert_eq!(format_layout(951_782_400_000, "2006-01-02"), "2000-02-29", "a leap day");
    }
}
