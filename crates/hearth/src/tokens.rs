//! `hearth token`: a tenant's tokens (`/v1/tokens`): make one with a
//! scope, list them, revoke or rotate one.

use clap::Subcommand;
use hearth_api::answers;

use crate::client::{Client, Target, fmt_time};

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token and print it (shown once; only its hash is kept).
    Create {
        /// admin (the operator's tenant only), deploy, invoke or read.
        #[arg(long)]
        scope: hearth_store::Scope,
        /// Only this function of the tenant.
        #[arg(long)]
        function: Option<String>,
        /// How long it works: 90s, 15m, 12h, 30d (default: until revoked).
        #[arg(long)]
        expires: Option<String>,
        /// A label for `hearth token ls`.
        #[arg(long)]
        name: Option<String>,
        /// Another tenant's token (admin only).
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// List the tenant's tokens (ids and grants; never the secrets).
    Ls {
        /// Another tenant's tokens (admin only).
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Revoke a token by its id (from `hearth token ls`).
    Revoke {
        id: String,
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Replace a token's secret with a new one, same grant; the old one
    /// stops working.
    Rotate {
        id: String,
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        target: Target,
    },
}

/// `?tenant=T`, or nothing.
fn whose(tenant: &Option<String>) -> String {
    tenant
        .as_deref()
        .map(|t| {
            format!(
                "?tenant={}",
                form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>()
            )
        })
        .unwrap_or_default()
}

/// One line of what a token may do: `read on resize until 2026-12-29 …`.
fn grant(p: &answers::Principal) -> String {
    let on = p
        .grant
        .function
        .as_deref()
        .map_or_else(|| "every function".to_string(), |f| format!("function {f}"));
    let until = p.grant.expires_ms.map_or_else(
        || "no expiry".to_string(),
        |at| {
            let past = at <= hearth_core::unix_time_ms();
            format!(
                "{} {}",
                if past { "expired" } else { "until" },
                fmt_time(at)
            )
        },
    );
    format!("{} on {on}, {until}", p.grant.scope)
}

fn made(c: &Client, m: &answers::TokenMade, v: &serde_json::Value, what: &str) {
    if c.json {
        c.print_json(v);
        return;
    }
    println!("{}", m.token);
    eprintln!(
        "{what} token {} of tenant {}: {} (shown once: keep it now)",
        m.info.id,
        m.info.tenant,
        grant(&m.info)
    );
}

pub(crate) async fn run(data_dir: &std::path::Path, cmd: TokenCommand) -> anyhow::Result<()> {
    match cmd {
        TokenCommand::Create {
            scope,
            function,
            expires,
            name,
            tenant,
            target,
        } => {
            let c = Client::new(data_dir, &target)?;
            let body = serde_json::json!({
                "scope": scope,
                "function": function,
                "expires": expires,
                "name": name,
            });
            let rb = c
                .request(
                    reqwest::Method::POST,
                    &format!("/v1/tokens{}", whose(&tenant)),
                )
                .json(&body);
            let (m, v): (answers::TokenMade, _) = c.send_as(rb).await?;
            made(&c, &m, &v, "made");
        }
        TokenCommand::Ls { tenant, target } => {
            let c = Client::new(data_dir, &target)?;
            let rb = c.request(
                reqwest::Method::GET,
                &format!("/v1/tokens{}", whose(&tenant)),
            );
            let (list, v): (answers::TokenList, _) = c.send_as(rb).await?;
            if c.json {
                c.print_json(&v);
                return Ok(());
            }
            println!("{:<16}  {:<12}  {:<23}  GRANT", "ID", "NAME", "CREATED");
            for t in &list.tokens {
                println!(
                    "{:<16}  {:<12}  {:<23}  {}",
                    t.id,
                    t.grant.name.as_deref().unwrap_or("-"),
                    fmt_time(t.created_ms),
                    grant(t)
                );
            }
        }
        TokenCommand::Revoke { id, tenant, target } => {
            let c = Client::new(data_dir, &target)?;
            let rb = c.request(
                reqwest::Method::DELETE,
                &format!("/v1/tokens/{id}{}", whose(&tenant)),
            );
            let (gone, v): (answers::Principal, _) = c.send_as(rb).await?;
            if c.json {
                c.print_json(&v);
            } else {
                println!(
                    "revoked token {} of tenant {}: {}",
                    gone.id,
                    gone.tenant,
                    grant(&gone)
                );
            }
        }
        TokenCommand::Rotate { id, tenant, target } => {
            let c = Client::new(data_dir, &target)?;
            let rb = c.request(
                reqwest::Method::POST,
                &format!("/v1/tokens/{id}/rotate{}", whose(&tenant)),
            );
            let (m, v): (answers::TokenMade, _) = c.send_as(rb).await?;
            made(&c, &m, &v, &format!("rotated {id}: new"));
        }
    }
    Ok(())
}
