//! `hearth logs` (also following as lines arrive) and the log lines
//! `hearth invoke --logs` prints after the response.

use std::time::Duration;

use hearth_api::answers::Logs;

use crate::client::{Client, fmt_time};

/// How often a follower asks for new lines.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Prints the newest `limit` lines of `name`'s log (only `invocation`'s,
/// if given); with `follow`, then every new line as it is stored, until
/// interrupted.
pub(crate) async fn show(
    c: &Client,
    name: &str,
    invocation: Option<String>,
    limit: u32,
    follow: bool,
) -> anyhow::Result<()> {
    let page = |after: Option<i64>| {
        let mut q = vec![("limit", limit.to_string())];
        q.extend(invocation.clone().map(|i| ("invocation", i)));
        q.extend(after.map(|a| ("after", a.to_string())));
        c.send_as::<Logs>(
            c.request(reqwest::Method::GET, &format!("/v1/functions/{name}/logs"))
                .query(&q),
        )
    };
    let (logs, v) = page(None).await?;
    if c.json && !follow {
        c.print_json(&v);
        return Ok(());
    }
    let mut last = print(c, &logs, &mut std::io::stdout())?;
    if !follow {
        return Ok(());
    }
    loop {
        tokio::time::sleep(FOLLOW_EVERY).await;
        let (logs, _) = page(Some(last.unwrap_or(0))).await?;
        last = print(c, &logs, &mut std::io::stdout())?.or(last);
    }
}

/// Prints invocation `id`'s lines of `name`'s log to standard error.
pub(crate) async fn of_invocation(c: &Client, name: &str, id: &str) -> anyhow::Result<()> {
    let (logs, _) = c
        .send_as::<Logs>(
            c.request(reqwest::Method::GET, &format!("/v1/functions/{name}/logs"))
                .query(&[("invocation", id), ("limit", "1000")]),
        )
        .await?;
    print(c, &logs, &mut std::io::stderr())?;
    Ok(())
}

/// Prints a logs answer's lines (one JSON object per line with --json);
/// the id of the last.
fn print(c: &Client, logs: &Logs, out: &mut dyn std::io::Write) -> anyhow::Result<Option<i64>> {
    for l in &logs.lines {
        if c.json {
            writeln!(out, "{}", serde_json::to_string(l)?)?;
            continue;
        }
        writeln!(
            out,
            "{} {} v{} {:<6} {}{}",
            fmt_time(l.ts_ms),
            l.invocation_id,
            l.version,
            l.stream.as_str(),
            if l.level.is_empty() {
                String::new()
            } else {
                format!("[{}] ", l.level)
            },
            l.message
        )?;
    }
    out.flush()?;
    Ok(logs.lines.last().map(|l| l.id))
}
