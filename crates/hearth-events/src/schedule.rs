//! What a schedule's expression means: the ticks it fires at.
//!
//! An expression is Vixie cron's five fields (`*/5 * * * *`: minute, hour,
//! day of month, month, day of week; a day of month and a day of week
//! both restricted match either, as cron's do), a nickname (`@hourly`,
//! `@daily`, `@weekly`, `@monthly`, `@yearly`), or `@every 30s` (a fixed
//! period, its ticks the multiples of it since the Unix epoch, so every
//! member agrees on them). A cron expression runs in UTC unless it starts
//! with `TZ=<IANA zone> ` (or `CRON_TZ=`, as cronie and Kubernetes write
//! it); across a daylight-saving change a wall-clock time that does not
//! exist fires at the first instant after the gap, and one that happens
//! twice fires once (croner's rules, which follow cron's). Parsing is
//! `croner`'s and the zones `jiff`'s, built in.

use std::fmt;
use std::str::FromStr;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

/// The shortest `@every` period.
pub const MIN_PERIOD_MS: i64 = 1_000;
/// The longest `@every` period (a year).
pub const MAX_PERIOD_MS: i64 = 366 * 24 * 3600 * 1000;

/// Why an expression is not a schedule, and what one looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "schedule {expr:?}: {why}. A schedule is five cron fields (minute hour day-of-month month \
     day-of-week, e.g. \"*/5 * * * *\"), optionally after TZ=<IANA zone> (\"TZ=Europe/Paris \
     0 9 * * 1-5\"); a nickname (@hourly, @daily, @weekly, @monthly, @yearly); or \"@every 30s\""
)]
pub struct ScheduleError {
    pub expr: String,
    pub why: String,
}

#[derive(Clone)]
enum Kind {
    Cron { cron: Box<Cron>, zone: TimeZone },
    Every { period_ms: i64 },
}

/// A parsed schedule.
#[derive(Clone)]
pub struct Schedule {
    /// As written, its whitespace collapsed.
    expr: String,
    kind: Kind,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Schedule").field(&self.expr).finish()
    }
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Schedule, ScheduleError> {
        let expr = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let bad = |why: String| ScheduleError {
            expr: expr.clone(),
            why,
        };
        if expr.is_empty() {
            return Err(bad("it is empty".into()));
        }
        if expr.len() > 200 {
            return Err(bad("it is longer than 200 characters".into()));
        }
        if let Some(period) = expr.strip_prefix("@every ") {
            let d: SignedDuration = period.parse().map_err(|e| {
                bad(format!(
                    "{period:?} is not a duration ({e}); write one like 30s, 5m or 1h30m"
                ))
            })?;
            let period_ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
            if !(MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&period_ms) {
                return Err(bad(format!(
                    "a period of {period} is outside 1s to 366 days"
                )));
            }
            return Ok(Schedule {
                expr,
                kind: Kind::Every { period_ms },
            });
        }
        let (zone, fields) = match expr
            .strip_prefix("TZ=")
            .or_else(|| expr.strip_prefix("CRON_TZ="))
        {
            Some(rest) => {
                let (name, fields) = rest.split_once(' ').unwrap_or((rest, ""));
                let zone = TimeZone::get(name).map_err(|_| {
                    bad(format!(
                        "{name:?} is not a time zone; name one from the IANA database, like \
                         Europe/Paris or America/New_York"
                    ))
                })?;
                (zone, fields)
            }
            None => (TimeZone::UTC, expr.as_str()),
        };
        if fields.starts_with("@every") {
            return Err(bad("@every takes no time zone".into()));
        }
        let cron = parse_cron(fields).map_err(bad)?;
        let schedule = Schedule {
            expr: expr.clone(),
            kind: Kind::Cron {
                cron: Box::new(cron),
                zone,
            },
        };
        // A pattern can parse and never match (`0 0 31 2 *`: 31 February).
        if schedule.next_after(hearth_core::unix_time_ms()).is_none() {
            return Err(bad("it never fires (no date matches it)".into()));
        }
        Ok(schedule)
    }
}

/// Five cron fields or a nickname; an error names the field at fault.
fn parse_cron(fields: &str) -> Result<Cron, String> {
    const NAMES: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
    let parser = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build();
    let said = |e: croner::errors::CronError| e.to_string().trim_end_matches('.').to_string();
    parser.parse(fields).map_err(|e| {
        let parts: Vec<&str> = fields.split(' ').collect();
        if parts.len() != 5 {
            let n = parts.len();
            return format!("it has {n} field{}, not 5", if n == 1 { "" } else { "s" });
        }
        // Each field alone among stars: the first that fails is at fault.
        for (i, part) in parts.iter().enumerate() {
            let mut alone = ["*"; 5];
            alone[i] = part;
            if let Err(e) = parser.parse(&alone.join(" ")) {
                return format!("its {} field {part:?} is not valid ({})", NAMES[i], said(e));
            }
        }
        said(e)
    })
}

impl Schedule {
    /// The expression, its whitespace collapsed: what is stored and shown.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// A name for it that stays the same for the same expression (so a
    /// redeploy that lists it again keeps its row: its pause, its next
    /// tick): 12 hex digits of its hash.
    pub fn id(&self) -> String {
        let hash = blake3::hash(self.expr.as_bytes());
        hash.to_hex()[..12].to_string()
    }

    /// The first tick strictly after `ms` (ms since the epoch), or `None`
    /// if there is none before the year 9999.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every { period_ms } => Some((ms.div_euclid(*period_ms) + 1) * period_ms),
            Kind::Cron { cron, zone } => {
                let at = Timestamp::from_millisecond(ms).ok()?;
                let from = Zoned::new(at, zone.clone());
                let next = cron.find_next_occurrence(&from, false).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }

    /// The ticks from `first` (a tick) to `now`, what a member that finds
    /// the schedule due at `now` with `first` unfired has to decide on:
    /// the last `keep` of them, oldest first, how many came before those,
    /// and the first tick after `now`. Counting stops after a million
    /// ticks (a minute's schedule down for two years): the count then
    /// says at least that many.
    pub fn ticks_through(&self, first: i64, now: i64, keep: usize) -> Option<Ticks> {
        const MAX_COUNTED: u64 = 1_000_000;
        let mut last = std::collections::VecDeque::with_capacity(keep + 1);
        let mut before = 0u64;
        let mut t = first;
        while t <= now {
            if before + last.len() as u64 >= MAX_COUNTED {
                return Some(Ticks {
                    kept: last.into(),
                    before,
                    next: self.next_after(now)?,
                });
            }
            last.push_back(t);
            if last.len() > keep {
                last.pop_front();
                before += 1;
            }
            t = self.next_after(t)?;
        }
        Some(Ticks {
            kept: last.into(),
            before,
            next: t,
        })
    }
}

/// The ticks a due schedule has reached ([`Schedule::ticks_through`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticks {
    /// The last ones up to now, oldest first.
    pub kept: Vec<i64>,
    /// How many came before them.
    pub before: u64,
    /// The first tick after now.
    pub next: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    fn at(ms: i64) -> String {
        Timestamp::from_millisecond(ms).unwrap().to_string()
    }

    #[test]
    fn cron_fields_fire_at_their_minutes_in_utc() {
        let s: Schedule = "*/5 * * * *".parse().unwrap();
        assert_eq!(
            at(s.next_after(ms("2026-11-29T10:31:20Z")).unwrap()),
            "2026-11-29T10:35:00Z"
        );
        assert_eq!(
            at(s.next_after(ms("2026-11-29T10:35:00Z")).unwrap()),
            "2026-11-29T10:40:00Z",
            "strictly after"
        );
        let hourly: Schedule = "@hourly".parse().unwrap();
        assert_eq!(
            at(hourly.next_after(ms("2026-11-29T10:31:00Z")).unwrap()),
            "2026-11-29T11:00:00Z"
        );
        // Vixie cron: a restricted day of month OR a restricted weekday.
        let either: Schedule = "0 0 1 * MON".parse().unwrap();
        assert_eq!(
            at(either.next_after(ms("2026-11-29T10:00:00Z")).unwrap()),
            "2026-11-30T00:00:00Z",
            "Monday 30 November comes before 1 December"
        );
    }

    #[test]
    fn a_zone_moves_the_ticks_and_its_daylight_saving_change_is_followed() {
        let paris: Schedule = "TZ=Europe/Paris 0 9 * * *".parse().unwrap();
        assert_eq!(
            at(paris.next_after(ms("2026-11-29T00:00:00Z")).unwrap()),
            "2026-11-29T08:00:00Z",
            "09:00 in Paris in winter is 08:00 UTC"
        );
        assert_eq!(
            at(paris.next_after(ms("2026-07-01T00:00:00Z")).unwrap()),
            "2026-07-01T07:00:00Z",
            "and 07:00 UTC in summer"
        );
        let spelled: Schedule = "CRON_TZ=America/New_York 30 2 * * *".parse().unwrap();
        // 8 March 2026, 02:30 does not exist in New York (clocks go
        // from 02:00 to 03:00): it fires at the first instant after.
        assert_eq!(
            at(spelled.next_after(ms("2026-03-08T06:00:00Z")).unwrap()),
            "2026-03-08T07:00:00Z"
        );
    }

    #[test]
    fn every_ticks_at_multiples_of_its_period_since_the_epoch() {
        let s: Schedule = "@every 30s".parse().unwrap();
        assert_eq!(s.next_after(1_000), Some(30_000));
        assert_eq!(s.next_after(30_000), Some(60_000));
        assert_eq!(s.next_after(59_999), Some(60_000));
        let long: Schedule = "@every 1h30m".parse().unwrap();
        assert_eq!(long.next_after(0), Some(5_400_000));
    }

    #[test]
    fn bad_expressions_name_what_is_wrong_and_what_a_schedule_is() {
        for (expr, says) in [
            ("", "empty"),
            ("* * * *", "4 fields, not 5"),
            ("61 * * * *", "minute field \"61\""),
            ("* 9-25 * * *", "hour field"),
            ("* * * * FRU", "day-of-week field"),
            ("* * * * * *", "6 fields, not 5"),
            ("@often", "1 field, not 5"),
            ("TZ=Europe/Pariss 0 9 * * *", "not a time zone"),
            ("@every 10ms", "outside 1s"),
            ("@every soon", "not a duration"),
            ("TZ=UTC @every 1m", "no time zone"),
            ("0 0 31 2 *", "never fires"),
        ] {
            let e = expr.parse::<Schedule>().unwrap_err().to_string();
            assert!(e.contains(says), "{expr:?}: {e}");
            assert!(e.contains("@every 30s"), "{expr:?} names the forms: {e}");
        }
    }

    #[test]
    fn one_expression_has_one_id_whatever_its_spacing() {
        let a: Schedule = "*/5  *  * * *".parse().unwrap();
        let b: Schedule = " */5 * * * * ".parse().unwrap();
        assert_eq!((a.id(), a.expr()), (b.id(), "*/5 * * * *"));
        let c: Schedule = "*/6 * * * *".parse().unwrap();
        assert_ne!(a.id(), c.id());
    }

    #[test]
    fn ticks_through_keeps_the_last_ones_and_counts_the_rest() {
        let s: Schedule = "@every 10s".parse().unwrap();
        let t = s.ticks_through(10_000, 55_000, 2).unwrap();
        assert_eq!(
            t,
            Ticks {
                kept: vec![40_000, 50_000],
                before: 3,
                next: 60_000
            }
        );
        let none = s.ticks_through(60_000, 55_000, 2).unwrap();
        assert_eq!((none.kept.len(), none.before, none.next), (0, 0, 60_000));
        // Down for years: counting stops, the next tick is still right.
        let every: Schedule = "@every 1s".parse().unwrap();
        let far = every.ticks_through(1_000, 10_000_000_000, 1).unwrap();
        assert_eq!(far.next, 10_000_001_000);
        assert!(far.before >= 999_999);
    }
}
