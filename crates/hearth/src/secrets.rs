//! `hearth secret`: the tenant's secrets (`/v1/secrets`): set (or
//! rotate) one, list them by name, remove one. Values are never printed:
//! no call answers one.

use clap::Subcommand;
use hearth_api::answers;

use crate::client::{Client, Target, fmt_time, read_data};

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set a secret, or rotate it: VALUE as given, @FILE a file's bytes,
    /// @- (or no VALUE) standard input. Functions that bind it read the
    /// new value from their next invocation; no deploy is needed.
    Set {
        name: String,
        value: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// List the tenant's secrets by name, with the functions binding them.
    Ls {
        #[command(flatten)]
        target: Target,
    },
    /// Remove a secret (refused while a function's live version binds it).
    Rm {
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

pub(crate) async fn run(data_dir: &std::path::Path, cmd: SecretCommand) -> anyhow::Result<()> {
    match cmd {
        SecretCommand::Set {
            name,
            value,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let mut value = read_data(value.as_deref().unwrap_or("@-"))?;
            // A value typed or piped in ends with the line's newline,
            // which is not part of it.
            if value.ends_with(b"\n") {
                value.pop();
            }
            let rb = c
                .request(reqwest::Method::PUT, &format!("/v1/secrets/{name}"))
                .body(value);
            let (set, v): (answers::SecretSet, _) = c.send_as(rb).await?;
            if c.json {
                c.print_json(&v);
            } else if set.created {
                println!("set secret {name}");
            } else {
                println!(
                    "rotated secret {name}: functions binding it read the new value from their next invocation"
                );
            }
        }
        SecretCommand::Ls { target } => {
            let c = Client::new(data_dir, &target)?;
            let (list, v): (answers::SecretList, _) = c
                .send_as(c.request(reqwest::Method::GET, "/v1/secrets"))
                .await?;
            if c.json {
                c.print_json(&v);
                return Ok(());
            }
            println!("{:<24}  {:<23}  BOUND BY", "NAME", "UPDATED");
            for s in &list.secrets {
                println!(
                    "{:<24}  {:<23}  {}",
                    s.info.name,
                    fmt_time(s.info.updated_ms),
                    if s.bound_by.is_empty() {
                        "-".to_string()
                    } else {
                        s.bound_by.join(", ")
                    }
                );
            }
        }
        SecretCommand::Rm { name, target } => {
            let c = Client::new(data_dir, &target)?;
            c.send(c.request(reqwest::Method::DELETE, &format!("/v1/secrets/{name}")))
                .await?;
            if c.json {
                c.print_json(&serde_json::json!({"removed": name}));
            } else {
                println!("removed secret {name}");
            }
        }
    }
    Ok(())
}
