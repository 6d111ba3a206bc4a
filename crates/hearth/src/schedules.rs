//! `hearth schedules`: a tenant's schedules (docs/events.md), set at
//! deploy (`--schedule`), listed, paused, resumed and removed here.

use clap::{Args, Subcommand};
use hearth_api::answers;
use hearth_store::ScheduleRow;

use crate::client::{Client, Target, fmt_time};

/// `hearth schedules [NAME]` lists; its subcommands change one.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SchedulesArgs {
    #[command(subcommand)]
    cmd: Option<ScheduleCommand>,
    /// Only this function's (default: every function's).
    name: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Stop firing a schedule until it is resumed.
    Pause {
        name: String,
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Fire a paused schedule again, from its next tick.
    Resume {
        name: String,
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a schedule.
    Rm {
        name: String,
        id: String,
        #[command(flatten)]
        target: Target,
    },
}

pub(crate) async fn run(data_dir: &std::path::Path, args: SchedulesArgs) -> anyhow::Result<()> {
    let (verb, name, id, target) = match args.cmd {
        None => return list(data_dir, args.name, &args.target).await,
        Some(ScheduleCommand::Pause { name, id, target }) => ("pause", name, id, target),
        Some(ScheduleCommand::Resume { name, id, target }) => ("resume", name, id, target),
        Some(ScheduleCommand::Rm { name, id, target }) => ("rm", name, id, target),
    };
    let c = Client::new(data_dir, &target)?;
    let path = format!("/v1/functions/{name}/schedules/{id}");
    let rb = match verb {
        "rm" => c.request(reqwest::Method::DELETE, &path),
        _ => c.request(reqwest::Method::POST, &format!("{path}/{verb}")),
    };
    let (row, v): (ScheduleRow, _) = c.send_as(rb).await?;
    if c.json {
        c.print_json(&v);
        return Ok(());
    }
    match verb {
        "pause" => println!("paused schedule {id} of {name} ({})", row.expr),
        "resume" => println!(
            "resumed schedule {id} of {name} ({}): next at {}",
            row.expr,
            fmt_time(row.next_ms)
        ),
        _ => println!("removed schedule {id} of {name} ({})", row.expr),
    }
    Ok(())
}

async fn list(
    data_dir: &std::path::Path,
    name: Option<String>,
    target: &Target,
) -> anyhow::Result<()> {
    let c = Client::new(data_dir, target)?;
    let path = match &name {
        Some(n) => format!("/v1/functions/{n}/schedules"),
        None => "/v1/schedules".into(),
    };
    let (list, v): (answers::Schedules, _) =
        c.send_as(c.request(reqwest::Method::GET, &path)).await?;
    if c.json {
        c.print_json(&v);
        return Ok(());
    }
    println!(
        "{:<20}  {:<12}  {:<23}  {:<23}  SCHEDULE",
        "FUNCTION", "ID", "NEXT", "LAST FIRED"
    );
    for s in &list.schedules {
        let next = if s.paused {
            "paused".to_string()
        } else {
            fmt_time(s.next_ms)
        };
        let last = s.fired_ms.map_or_else(|| "-".to_string(), fmt_time);
        let catch_up = match s.catch_up {
            0 => String::new(),
            n => format!("  (catches up {n})"),
        };
        println!(
            "{:<20}  {:<12}  {next:<23}  {last:<23}  {}{catch_up}",
            s.function, s.id, s.expr
        );
    }
    Ok(())
}
