//! `hearth promote`, `rollback`, `aliases` and `versions --download`: a
//! function's releases, through `/v1/functions/{name}/aliases` and
//! `/versions/{n}/code`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use hearth_api::answers;

use crate::client::{Client, fmt_time};

/// `version 3`, or `version 3, 5% to version 4` where it splits.
fn target(version: u32, split: Option<hearth_store::Split>) -> String {
    match split {
        Some(s) => format!("version {version}, {}% to version {}", s.percent, s.version),
        None => format!("version {version}"),
    }
}

/// One line for a move: where the alias points now and where it was.
fn describe(name: &str, m: &answers::AliasMove) -> String {
    let from = m
        .previous
        .map_or_else(|| "nothing".to_string(), |p| target(p, m.previous_split));
    let how = if m.rollback {
        "rolled back"
    } else {
        "promoted"
    };
    format!(
        "{how} {name}@{}: {} (was {from})",
        m.alias,
        target(m.version, m.split)
    )
}

/// Sends `percent` of `alias`'s calls to `version`, the rest staying on
/// the version it points at (0: none, ending a split).
pub(crate) async fn split(
    c: &Client,
    name: &str,
    alias: &str,
    version: u32,
    percent: u8,
) -> anyhow::Result<()> {
    let (list, _): (answers::Aliases, _) = c
        .send_as(c.request(
            reqwest::Method::GET,
            &format!("/v1/functions/{name}/aliases"),
        ))
        .await?;
    let current = list.aliases.iter().find(|a| a.alias == alias).with_context(|| {
        format!("{name} has no alias {alias:?}: `hearth promote {name} VERSION --alias {alias}` makes it")
    })?;
    let rb = c
        .request(
            reqwest::Method::POST,
            &format!("/v1/functions/{name}/aliases/{alias}"),
        )
        .json(&answers::Promotion {
            version: current.version,
            split: (percent > 0).then_some(hearth_store::Split { version, percent }),
            gate: None,
        });
    let (moved, v): (answers::AliasMove, _) = c.send_as(rb).await?;
    if c.json {
        c.print_json(&v);
    } else {
        println!("{}", describe(name, &moved));
    }
    Ok(())
}

pub(crate) async fn promote(
    c: &Client,
    name: &str,
    alias: &str,
    version: u32,
    gate: Option<answers::Gate>,
) -> anyhow::Result<()> {
    let promotion = answers::Promotion {
        version,
        split: None,
        gate,
    };
    let (promoted, v) = move_alias(c, name, alias, &promotion).await?;
    if c.json {
        c.print_json(&v);
    } else {
        print_promoted(name, &promoted);
    }
    Ok(())
}

/// Moves `alias` as `promotion` says. A gate that refuses is an error
/// that lists each replay that differed (with its diff).
async fn move_alias(
    c: &Client,
    name: &str,
    alias: &str,
    promotion: &answers::Promotion,
) -> anyhow::Result<(answers::Promoted, serde_json::Value)> {
    let path = format!("/v1/functions/{name}/aliases/{alias}");
    let resp = c
        .request(reqwest::Method::POST, &path)
        .json(promotion)
        .send()
        .await
        .with_context(|| format!("cannot reach Hearth at {}", c.url))?;
    if resp.status() == reqwest::StatusCode::CONFLICT {
        let body = resp.bytes().await?;
        if let Ok(refused) = serde_json::from_slice::<answers::GateRefused>(&body) {
            if c.json {
                c.print_json(&serde_json::from_slice(&body)?);
            } else {
                print_differing(&refused.gate);
            }
            let message = refused.error["message"]
                .as_str()
                .unwrap_or("the gate refused");
            anyhow::bail!("409 {message}");
        }
        let message = serde_json::from_slice::<answers::ErrorBody>(&body)
            .map(|b| b.error.message.into_owned())
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
        anyhow::bail!("409 {message}");
    }
    let v: serde_json::Value = {
        let status = resp.status();
        let bytes = resp.bytes().await?;
        if !status.is_success() {
            let message = serde_json::from_slice::<answers::ErrorBody>(&bytes)
                .map(|b| b.error.message.into_owned())
                .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
            anyhow::bail!("{} {message}", status.as_u16());
        }
        serde_json::from_slice(&bytes)?
    };
    let promoted = serde_json::from_value(v.clone())
        .context("the promotion's answer is not in the shape this CLI knows")?;
    Ok((promoted, v))
}

/// Each replay a gate found different: its tape, verdict and diff.
fn print_differing(gate: &answers::GateResult) {
    for r in &gate.differing {
        eprintln!("tape {}: {}", r.id, r.verdict);
        if let Some(diff) = &r.diff {
            for line in diff.lines() {
                eprintln!("  {line}");
            }
        }
    }
}

fn print_promoted(name: &str, promoted: &answers::Promoted) {
    if let Some(gate) = &promoted.gate {
        print_differing(gate);
        println!(
            "gate: {} tapes of version {} replayed against version {} in {} ms: {} identical{}",
            gate.replayed,
            gate.tapes_of,
            gate.against,
            gate.took_ms,
            gate.replayed - gate.not_identical,
            if gate.not_identical == 0 {
                String::new()
            } else {
                format!(", {} differing (accepted)", gate.not_identical)
            }
        );
    }
    println!("{}", describe(name, &promoted.moved));
}

/// A canary: the steps (percent of the alias's calls to `version`), how
/// long each runs, and the error rate that rolls it back.
pub(crate) struct Canary {
    pub steps: Vec<u8>,
    pub step_wait: std::time::Duration,
    /// Percent of the canary's calls that may fail (5xx or a failure).
    pub max_error_percent: f64,
}

/// Steps `alias` to `version` through `canary`'s percentages, gated by
/// replay before each step, and checking the canary's own calls between
/// steps; a breach puts the alias back where it was (no split) and fails.
pub(crate) async fn canary(
    c: &Client,
    name: &str,
    alias: &str,
    version: u32,
    gate: answers::Gate,
    canary: Canary,
) -> anyhow::Result<()> {
    let (list, _): (answers::Aliases, _) = c
        .send_as(c.request(
            reqwest::Method::GET,
            &format!("/v1/functions/{name}/aliases"),
        ))
        .await?;
    let stable = list
        .aliases
        .iter()
        .find(|a| a.alias == alias)
        .map(|a| a.version)
        .with_context(|| {
            format!(
                "{name} has no alias {alias:?} to step a canary on: promote a first version to it"
            )
        })?;
    let back = answers::Promotion {
        version: stable,
        split: None,
        gate: None,
    };
    for &percent in &canary.steps {
        let promotion = answers::Promotion {
            version: if percent >= 100 { version } else { stable },
            split: (percent < 100).then_some(hearth_store::Split { version, percent }),
            gate: Some(gate.clone()),
        };
        let (promoted, _) = match move_alias(c, name, alias, &promotion).await {
            Ok(moved) => moved,
            Err(e) => {
                move_alias(c, name, alias, &back).await?;
                return Err(e.context(format!(
                    "the canary stopped at {percent}%: {name}@{alias} is back on version {stable}"
                )));
            }
        };
        print_promoted(name, &promoted);
        if percent >= 100 {
            return Ok(());
        }
        tokio::time::sleep(canary.step_wait).await;
        let since = format!("{}s", canary.step_wait.as_secs().max(1));
        let count = async |status: Option<&str>| -> anyhow::Result<usize> {
            let mut q = vec![
                ("version", version.to_string()),
                ("since", since.clone()),
                ("limit", "1000".to_string()),
            ];
            if let Some(s) = status {
                q.push(("status", s.to_string()));
            }
            let rb = c
                .request(
                    reqwest::Method::GET,
                    &format!("/v1/functions/{name}/recordings"),
                )
                .query(&q);
            let (tapes, _): (answers::Recordings, _) = c.send_as(rb).await?;
            Ok(tapes.recordings.len())
        };
        let (calls, failed) = (count(None).await?, count(Some("error")).await?);
        let rate = if calls == 0 {
            f64::INFINITY
        } else {
            100.0 * failed as f64 / calls as f64
        };
        if calls == 0 || rate > canary.max_error_percent {
            move_alias(c, name, alias, &back).await?;
            let why = if calls == 0 {
                format!(
                    "no call reached version {version} in {since}, so its error rate is unknown                      (send traffic, or lengthen --step-wait)"
                )
            } else {
                format!(
                    "{failed} of its {calls} calls in {since} failed ({rate:.1}%, more than                      --max-error-rate {}%)",
                    canary.max_error_percent
                )
            };
            anyhow::bail!(
                "the canary at {percent}% breached: {why}; {name}@{alias} is back on version {stable}"
            );
        }
        println!(
            "canary at {percent}%: {failed} of {calls} calls to version {version} failed in {since}"
        );
    }
    Ok(())
}

pub(crate) async fn rollback(c: &Client, name: &str, alias: &str) -> anyhow::Result<()> {
    let rb = c.request(
        reqwest::Method::POST,
        &format!("/v1/functions/{name}/aliases/{alias}/rollback"),
    );
    let (moved, v): (answers::AliasMove, _) = c.send_as(rb).await?;
    if c.json {
        c.print_json(&v);
    } else {
        println!("{}", describe(name, &moved));
    }
    Ok(())
}

pub(crate) async fn aliases(c: &Client, name: &str, history: Option<&str>) -> anyhow::Result<()> {
    let (list, v): (answers::Aliases, _) = c
        .send_as(c.request(
            reqwest::Method::GET,
            &format!("/v1/functions/{name}/aliases"),
        ))
        .await?;
    let moves = match history {
        Some(alias) => {
            let (h, hv): (answers::AliasHistory, _) = c
                .send_as(c.request(
                    reqwest::Method::GET,
                    &format!("/v1/functions/{name}/aliases/{alias}/history"),
                ))
                .await?;
            Some((h, hv))
        }
        None => None,
    };
    if c.json {
        match moves {
            Some((_, hv)) => c.print_json(&serde_json::json!({"aliases": v, "history": hv})),
            None => c.print_json(&v),
        }
        return Ok(());
    }
    if list.aliases.is_empty() {
        println!("{name} has no aliases: no version is live (`hearth promote {name} VERSION`)");
    }
    for a in &list.aliases {
        match a.split {
            Some(s) => println!(
                "{:<16} {} ({}% to {})",
                a.alias, a.version, s.percent, s.version
            ),
            None => println!("{:<16} {}", a.alias, a.version),
        }
    }
    if let Some((h, _)) = moves {
        println!();
        for m in &h.moves {
            println!("{}  {}", fmt_time(m.at_ms), describe(name, m));
        }
    }
    Ok(())
}

pub(crate) async fn remove(c: &Client, name: &str, alias: &str) -> anyhow::Result<()> {
    c.send(c.request(
        reqwest::Method::DELETE,
        &format!("/v1/functions/{name}/aliases/{alias}"),
    ))
    .await?;
    if c.json {
        c.print_json(&serde_json::json!({"removed": alias}));
    } else {
        println!("removed {name}@{alias}");
    }
    Ok(())
}

pub(crate) async fn download(
    c: &Client,
    name: &str,
    version: u32,
    output: Option<PathBuf>,
) -> anyhow::Result<()> {
    let bytes = c
        .send_raw(c.request(
            reqwest::Method::GET,
            &format!("/v1/functions/{name}/versions/{version}/code"),
        ))
        .await?;
    let output = output.unwrap_or_else(|| PathBuf::from(format!("{name}@{version}")));
    if output.as_os_str() == "-" {
        let mut out = std::io::stdout();
        out.write_all(&bytes)?;
        out.flush()?;
        return Ok(());
    }
    std::fs::write(&output, &bytes)
        .with_context(|| format!("failed to write {}", output.display()))?;
    if !c.json {
        eprintln!(
            "wrote version {version} of {name} ({} bytes) to {}",
            bytes.len(),
            output.display()
        );
    }
    Ok(())
}
