//! `hearth dlq`: a function's dead letters (docs/events.md): list them,
//! queue them again, or purge them.

use clap::{Args, Subcommand};
use hearth_api::answers;

use crate::client::{Client, Target, fmt_time};

/// `hearth dlq NAME` lists; its subcommands replay or purge.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DlqArgs {
    #[command(subcommand)]
    cmd: Option<DlqCommand>,
    /// The function whose dead letters to list.
    name: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Queue a function's dead letters (or one) again, from a first attempt.
    Replay {
        name: String,
        /// One dead letter's invocation id (default: all).
        id: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Delete a function's dead letters (or one).
    Purge {
        name: String,
        id: Option<String>,
        #[command(flatten)]
        target: Target,
    },
}

pub(crate) async fn run(data_dir: &std::path::Path, args: DlqArgs) -> anyhow::Result<()> {
    let (verb, name, id, target) = match args.cmd {
        None => {
            let name = args
                .name
                .ok_or_else(|| anyhow::anyhow!("name the function: hearth dlq NAME"))?;
            return list(data_dir, &name, &args.target).await;
        }
        Some(DlqCommand::Replay { name, id, target }) => ("replay", name, id, target),
        Some(DlqCommand::Purge { name, id, target }) => ("purge", name, id, target),
    };
    let c = Client::new(data_dir, &target)?;
    let path = format!("/v1/functions/{name}/dlq");
    let rb = match verb {
        "replay" => c.request(reqwest::Method::POST, &format!("{path}/replay")),
        _ => c.request(reqwest::Method::DELETE, &path),
    };
    let rb = match &id {
        Some(id) => rb.query(&[("id", id)]),
        None => rb,
    };
    let (taken, v): (answers::DeadLettersTaken, _) = c.send_as(rb).await?;
    if c.json {
        c.print_json(&v);
    } else if verb == "replay" {
        println!("queued {} dead letter(s) of {name} again", taken.count);
    } else {
        println!("purged {} dead letter(s) of {name}", taken.count);
    }
    Ok(())
}

async fn list(data_dir: &std::path::Path, name: &str, target: &Target) -> anyhow::Result<()> {
    let c = Client::new(data_dir, target)?;
    let (list, v): (answers::DeadLetters, _) = c
        .send_as(c.request(reqwest::Method::GET, &format!("/v1/functions/{name}/dlq")))
        .await?;
    if c.json {
        c.print_json(&v);
        return Ok(());
    }
    println!(
        "{:<32}  {:<23}  {:<20}  {:>8}  ERROR",
        "INVOCATION", "QUEUED", "SOURCE", "ATTEMPTS"
    );
    for d in &list.dead {
        println!(
            "{:<32}  {:<23}  {:<20}  {:>8}  {}",
            d.id,
            fmt_time(d.enqueued_ms),
            d.source,
            d.attempts,
            d.error
        );
    }
    Ok(())
}
