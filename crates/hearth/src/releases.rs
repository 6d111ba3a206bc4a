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
) -> anyhow::Result<()> {
    let rb = c
        .request(
            reqwest::Method::POST,
            &format!("/v1/functions/{name}/aliases/{alias}"),
        )
        .json(&answers::Promotion {
            version,
            split: None,
        });
    let (moved, v): (answers::AliasMove, _) = c.send_as(rb).await?;
    if c.json {
        c.print_json(&v);
    } else {
        println!("{}", describe(name, &moved));
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
