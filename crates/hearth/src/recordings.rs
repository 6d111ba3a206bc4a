//! `hearth recordings` and `hearth replay`: the readable side of the
//! `/v1/recordings` API.

use anyhow::Context;
use hearth_api::answers::{Recordings, Replayed, TrafficReplay};
use serde_json::Value;

use crate::client::{Client, fmt_time};

/// Which of a function's recordings `hearth recordings NAME` lists.
#[derive(Debug, clap::Args)]
pub(crate) struct Filter {
    /// `error`, `any`, or an HTTP status.
    #[arg(long)]
    status: Option<String>,
    /// Only invocations newer than this: 90s, 15m, 1h, 2d.
    #[arg(long)]
    since: Option<String>,
    /// Only invocations of this version.
    #[arg(long, value_name = "N")]
    version: Option<u32>,
    /// Only invocations in this trace (its 32 hex digits).
    #[arg(long)]
    trace: Option<String>,
    /// Only invocations older than this one: the next page.
    #[arg(long, value_name = "ID")]
    before: Option<String>,
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

pub(crate) async fn list(c: &Client, name: &str, f: Filter) -> anyhow::Result<()> {
    let mut q = vec![("limit", f.limit.to_string())];
    q.extend(f.status.map(|s| ("status", s)));
    q.extend(f.since.map(|s| ("since", s)));
    q.extend(f.version.map(|v| ("version", v.to_string())));
    q.extend(f.trace.map(|t| ("trace_id", t)));
    q.extend(f.before.map(|b| ("before", b)));
    let (listed, v): (Recordings, _) = c
        .send_as(
            c.request(
                reqwest::Method::GET,
                &format!("/v1/functions/{name}/recordings"),
            )
            .query(&q),
        )
        .await?;
    if c.json {
        c.print_json(&v);
        return Ok(());
    }
    println!(
        "{:<32}  {:<23}  {:>4}  {:<8}  {:>6}  {:>10}  OUTCOME",
        "ID", "STARTED", "VER", "TIER", "STATUS", "DURATION"
    );
    for t in &listed.recordings {
        println!(
            "{:<32}  {:<23}  {:>4}  {:<8}  {:>6}  {:>8.2}ms  {}",
            t.id,
            fmt_time(t.started_ms),
            t.version,
            t.tier,
            t.status,
            t.duration_us as f64 / 1000.0,
            t.outcome,
        );
    }
    if let Some(next) = &listed.next_before {
        println!("older: hearth recordings {name} --before {next}");
    }
    Ok(())
}

pub(crate) async fn show(c: &Client, id: &str) -> anyhow::Result<()> {
    let v = c
        .send(c.request(reqwest::Method::GET, &format!("/v1/recordings/{id}")))
        .await?;
    if c.json {
        c.print_json(&v);
        return Ok(());
    }
    let req = &v["request"];
    println!(
        "recording {}  {} v{} ({} tier)  {}  {:.2} ms",
        v["id"].as_str().unwrap_or_default(),
        v["function"].as_str().unwrap_or_default(),
        v["version"],
        v["tier"].as_str().unwrap_or_default(),
        fmt_time(v["started_ms"].as_i64().unwrap_or(0)),
        v["duration_us"].as_f64().unwrap_or(0.0) / 1000.0
    );
    let query = req["query"].as_str().unwrap_or_default();
    println!(
        "  request   {} {}{}{}  ({} bytes)",
        req["method"].as_str().unwrap_or_default(),
        req["path"].as_str().unwrap_or_default(),
        if query.is_empty() { "" } else { "?" },
        query,
        req["body"]["bytes"]
    );
    for call in v["calls"].as_array().into_iter().flatten() {
        // KV and HTTP calls that went to the world: when, and for how long.
        let timing = match (call["at_us"].as_f64(), call["took_us"].as_f64()) {
            (Some(at), Some(took)) => {
                format!("  (at {:.2} ms, {:.2} ms)", at / 1000.0, took / 1000.0)
            }
            _ => String::new(),
        };
        println!(
            "  {:>3}  {}  →  {}{timing}",
            call["n"],
            call["call"].as_str().unwrap_or_default(),
            call["answer"].as_str().unwrap_or_default()
        );
    }
    if let Some(next) = v["next_offset"].as_u64() {
        println!(
            "  …    {} more calls (GET /v1/recordings/{id}?offset={next})",
            v["calls_total"].as_u64().unwrap_or(next) - next
        );
    }
    println!("  outcome   {}", outcome_line(&v["outcome"]));
    Ok(())
}

fn outcome_line(o: &Value) -> String {
    match o["kind"].as_str() {
        Some("ok") => format!(
            "{} ({} bytes): {}",
            o["status"],
            o["body"]["bytes"],
            preview(o["body"]["text"].as_str().unwrap_or_default())
        ),
        _ => format!(
            "{} {}: {}",
            o["status"],
            o["kind"].as_str().unwrap_or_default(),
            o["message"].as_str().unwrap_or_default()
        ),
    }
}

fn preview(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.len() > 80 || text.lines().count() > 1 {
        format!("{:?}…", &line[..line.floor_char_boundary(80)])
    } else {
        format!("{line:?}")
    }
}

/// Prints one replay's verdict (its JSON, `v`, with --json); true if it
/// was identical.
fn print_report(c: &Client, r: &Replayed, v: &Value) -> bool {
    if c.json {
        c.print_json(v);
        return r.identical;
    }
    println!(
        "{}  v{} → v{}{}: {}",
        r.id,
        r.recorded_version,
        r.replayed_version,
        if r.code_changed && r.recorded_version == r.replayed_version {
            " (the code under this version changed)"
        } else {
            ""
        },
        r.verdict
    );
    for line in r.diff.iter().flat_map(|d| d.lines()) {
        println!("    {line}");
    }
    r.identical
}

pub(crate) async fn replay(c: &Client, id: &str, version: Option<u32>) -> anyhow::Result<bool> {
    let mut rb = c.request(
        reqwest::Method::POST,
        &format!("/v1/recordings/{id}/replay"),
    );
    if let Some(v) = version {
        rb = rb.query(&[("version", v)]);
    }
    let (r, v) = c.send_as(rb).await?;
    Ok(print_report(c, &r, &v))
}

pub(crate) async fn replay_file(
    c: &Client,
    tape: Vec<u8>,
    version: Option<u32>,
) -> anyhow::Result<bool> {
    let mut rb = c.request(reqwest::Method::POST, "/v1/replay").body(tape);
    if let Some(v) = version {
        rb = rb.query(&[("version", v)]);
    }
    let (r, v) = c
        .send_as(rb)
        .await
        .context("replaying the tape file failed")?;
    Ok(print_report(c, &r, &v))
}

pub(crate) async fn replay_traffic(
    c: &Client,
    name: &str,
    against: u32,
    last: Option<u32>,
    since: Option<String>,
    status: Option<String>,
) -> anyhow::Result<()> {
    let mut q = vec![("against", against.to_string())];
    q.extend(last.map(|l| ("last", l.to_string())));
    q.extend(since.map(|s| ("since", s)));
    q.extend(status.map(|s| ("status", s)));
    let (traffic, v): (TrafficReplay, _) = c
        .send_as(
            c.request(
                reqwest::Method::POST,
                &format!("/v1/functions/{name}/replay"),
            )
            .query(&q),
        )
        .await?;
    if c.json {
        c.print_json(&v);
        return Ok(());
    }
    for r in &traffic.results {
        if r.diff.is_some() || r.divergence.is_some() {
            print_report(c, r, &Value::Null);
        }
    }
    println!(
        "replayed {} recordings of {name} against v{against}: {} responses changed, {} diverged from their tape",
        traffic.replayed, traffic.changed, traffic.diverged
    );
    Ok(())
}
