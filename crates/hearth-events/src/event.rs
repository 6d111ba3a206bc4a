//! The request a schedule's firing is: what every runtime gets
//! (docs/events.md). Its body is EventBridge's scheduled event, which a
//! Lambda handler gets whole; the JavaScript runtimes give a Workers
//! module's `scheduled()` a controller made from its `detail`; a wasm
//! module reads it as a CGI POST with `HTTP_HEARTH_EVENT=scheduled`.

use hearth_core::{EVENT_HEADER, InvocationId, Request};
use hearth_store::ScheduleRow;
use serde_json::json;

/// The `hearth-event` value of a schedule's firing.
pub const SCHEDULED: &str = "scheduled";

/// The invocation id of `row`'s firing at `tick_ms`: the same wherever
/// and however often it is worked out, so the tick is queued once (the
/// queue keeps one row per id) and every attempt at it shares the
/// journal that makes its effects happen once. A UUIDv7 whose time is the
/// tick, so tapes of firings sort by when they were due.
pub fn firing_id(row: &ScheduleRow, tick_ms: i64) -> InvocationId {
    let mut h = blake3::Hasher::new();
    for part in [&row.tenant, &row.function, &row.id] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    h.update(&tick_ms.to_le_bytes());
    let hash = h.finalize();
    let random: [u8; 10] = hash.as_bytes()[..10]
        .try_into()
        .expect("a blake3 hash has 32 bytes");
    let ms = u64::try_from(tick_ms).unwrap_or(0);
    InvocationId(uuid::Builder::from_unix_timestamp_millis(ms, &random).into_uuid())
}

/// The request of `row`'s firing at `tick_ms`, invocation `id`.
pub fn scheduled_request(row: &ScheduleRow, tick_ms: i64, id: InvocationId) -> Request {
    let time = jiff::Timestamp::from_millisecond(tick_ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let event = json!({
        "version": "0",
        "id": id.0.hyphenated().to_string(),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": row.tenant,
        "time": time,
        "region": "hearth",
        "resources": [format!("hearth:schedule/{}/{}/{}", row.tenant, row.function, row.id)],
        "detail": {
            "schedule": row.id,
            "cron": row.expr,
            "scheduledTime": tick_ms,
        },
    });
    Request {
        method: "POST".into(),
        path: "/".into(),
        query: String::new(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            (EVENT_HEADER.into(), SCHEDULED.into()),
            ("user-agent".into(), "hearth-scheduler".into()),
        ],
        body: serde_json::to_vec(&event)
            .expect("a JSON value serializes")
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> ScheduleRow {
        ScheduleRow {
            tenant: "acme".into(),
            function: "report".into(),
            id: "0123456789ab".into(),
            expr: "*/5 * * * *".into(),
            catch_up: 0,
            paused: false,
            next_ms: 0,
            fired_ms: None,
            created_ms: 0,
        }
    }

    #[test]
    fn a_ticks_id_is_fixed_by_the_schedule_and_tick_and_sorts_by_tick() {
        let tick = 1_764_412_500_000;
        let id = firing_id(&row(), tick);
        assert_eq!(id, firing_id(&row(), tick));
        assert_ne!(id, firing_id(&row(), tick + 300_000));
        let other = ScheduleRow {
            function: "other".into(),
            ..row()
        };
        assert_ne!(id, firing_id(&other, tick));
        assert_eq!(id.0.get_version_num(), 7);
        let (secs, _) = id.0.get_timestamp().unwrap().to_unix();
        assert_eq!(secs * 1000, tick as u64);
    }

    #[test]
    fn the_request_carries_eventbridges_scheduled_event() {
        let tick = 1_764_412_500_000;
        let id = firing_id(&row(), tick);
        let req = scheduled_request(&row(), tick, id);
        assert_eq!((req.method.as_str(), req.path.as_str()), ("POST", "/"));
        assert!(
            req.headers
                .iter()
                .any(|(k, v)| k == EVENT_HEADER && v == SCHEDULED)
        );
        let event: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(event["detail-type"], "Scheduled Event");
        assert_eq!(event["source"], "aws.events");
        assert_eq!(event["time"], "2025-11-29T10:35:00Z");
        assert_eq!(event["id"], id.0.hyphenated().to_string());
        assert_eq!(event["detail"]["scheduledTime"], tick);
        assert_eq!(event["detail"]["cron"], "*/5 * * * *");
    }
}
