//! `hearth triggers`: a tenant's broker bindings (docs/events.md), set at
//! deploy (`--trigger`), listed, paused, resumed and removed here.

use clap::{Args, Subcommand};
use hearth_api::answers;
use hearth_store::TriggerRow;

use crate::client::{Client, Target};

/// `hearth triggers [NAME]` lists; its subcommands change one.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TriggersArgs {
    #[command(subcommand)]
    cmd: Option<TriggerCommand>,
    /// Only this function's (default: every function's).
    name: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Subcommand)]
pub enum TriggerCommand {
    /// Stop consuming a binding's messages (they wait in the broker).
    Pause {
        name: String,
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Consume a paused binding again, from the messages that waited.
    Resume {
        name: String,
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a binding, and its consumer on the broker.
    Rm {
        name: String,
        id: String,
        #[command(flatten)]
        target: Target,
    },
}

/// Where a binding reads, as `hearth triggers` shows it.
pub(crate) fn source(row: &TriggerRow) -> String {
    match hearth_events::Binding::of_row(row) {
        Ok(hearth_events::Binding::Nats(b)) => format!(
            "nats://{}:{}/{}{}",
            b.host,
            b.port,
            b.stream,
            b.subject.map(|s| format!(" ({s})")).unwrap_or_default()
        ),
        Err(e) => format!("{} ({e})", row.kind),
    }
}

pub(crate) async fn run(data_dir: &std::path::Path, args: TriggersArgs) -> anyhow::Result<()> {
    let (verb, name, id, target) = match args.cmd {
        None => return list(data_dir, args.name, &args.target).await,
        Some(TriggerCommand::Pause { name, id, target }) => ("pause", name, id, target),
        Some(TriggerCommand::Resume { name, id, target }) => ("resume", name, id, target),
        Some(TriggerCommand::Rm { name, id, target }) => ("rm", name, id, target),
    };
    let c = Client::new(data_dir, &target)?;
    let path = format!("/v1/functions/{name}/triggers/{id}");
    let rb = match verb {
        "rm" => c.request(reqwest::Method::DELETE, &path),
        _ => c.request(reqwest::Method::POST, &format!("{path}/{verb}")),
    };
    let (row, v): (TriggerRow, _) = c.send_as(rb).await?;
    if c.json {
        c.print_json(&v);
        return Ok(());
    }
    let what = match verb {
        "pause" => "paused",
        "resume" => "resumed",
        _ => "removed",
    };
    println!("{what} trigger {id} of {name} ({})", source(&row));
    Ok(())
}

async fn list(
    data_dir: &std::path::Path,
    name: Option<String>,
    target: &Target,
) -> anyhow::Result<()> {
    let c = Client::new(data_dir, target)?;
    let path = match &name {
        Some(n) => format!("/v1/functions/{n}/triggers"),
        None => "/v1/triggers".into(),
    };
    let (list, v): (answers::Triggers, _) =
        c.send_as(c.request(reqwest::Method::GET, &path)).await?;
    if c.json {
        c.print_json(&v);
        return Ok(());
    }
    println!("{:<20}  {:<12}  {:<8}  SOURCE", "FUNCTION", "ID", "STATE");
    for t in &list.triggers {
        let state = if t.paused { "paused" } else { "running" };
        println!(
            "{:<20}  {:<12}  {state:<8}  {}",
            t.function,
            t.id,
            source(t)
        );
    }
    Ok(())
}
