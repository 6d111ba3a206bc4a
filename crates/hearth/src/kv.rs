//! `hearth kv`: a function's KV from outside it (`/v1/functions/{name}/kv`),
//! to seed it before the first request or look at what it keeps.

use std::io::Write;

use clap::Subcommand;

use crate::client::{Client, Target, read_data};

#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Print a key's value (raw bytes, as the function stored them).
    Get {
        name: String,
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Set a key: VALUE as given, @FILE a file's bytes, @- standard input.
    Set {
        name: String,
        key: String,
        value: String,
        #[command(flatten)]
        target: Target,
    },
    /// List keys, optionally only those starting with --prefix.
    Ls {
        name: String,
        #[arg(long, default_value = "")]
        prefix: String,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a key.
    Rm {
        name: String,
        key: String,
        #[command(flatten)]
        target: Target,
    },
}

/// The API path of `key` in `name`'s KV (the key as one path segment).
fn key_path(name: &str, key: &str) -> String {
    let key: String = form_urlencoded::byte_serialize(key.as_bytes()).collect();
    format!("/v1/functions/{name}/kv/{}", key.replace('+', "%20"))
}

pub(crate) async fn run(data_dir: &std::path::Path, cmd: KvCommand) -> anyhow::Result<()> {
    match cmd {
        KvCommand::Get { name, key, target } => {
            let c = Client::new(data_dir, &target)?;
            let value = c
                .send_raw(c.request(reqwest::Method::GET, &key_path(&name, &key)))
                .await?;
            std::io::stdout().write_all(&value)?;
        }
        KvCommand::Set {
            name,
            key,
            value,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let value = read_data(&value)?;
            c.send_raw(
                c.request(reqwest::Method::PUT, &key_path(&name, &key))
                    .body(value),
            )
            .await?;
        }
        KvCommand::Ls {
            name,
            prefix,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let (keys, v): (hearth_api::answers::Keys, _) = c
                .send_as(
                    c.request(reqwest::Method::GET, &format!("/v1/functions/{name}/kv"))
                        .query(&[("prefix", prefix)]),
                )
                .await?;
            if c.json {
                c.print_json(&v);
                return Ok(());
            }
            for k in &keys.keys {
                println!("{k}");
            }
            if keys.not_utf8 > 0 {
                eprintln!("({} keys that are not UTF-8 not shown)", keys.not_utf8);
            }
        }
        KvCommand::Rm { name, key, target } => {
            let c = Client::new(data_dir, &target)?;
            c.send_raw(c.request(reqwest::Method::DELETE, &key_path(&name, &key)))
                .await?;
        }
    }
    Ok(())
}
