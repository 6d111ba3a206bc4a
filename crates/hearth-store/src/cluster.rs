//! What the members of a cluster share through PostgreSQL beyond the
//! registry: who the nodes are (each writes its own row and refreshes it
//! every heartbeat), the code every node runs (artifacts by hash), the
//! settings every member follows, and a channel of changes
//! (`LISTEN`/`NOTIFY`) so that no member serves from a stale cache.
//!
//! Any gateway can then take any request: it reads the nodes' rows, not
//! messages a node sent to one gateway, so a gateway that starts late or
//! restarts has the whole picture at its first read.
//!
//! Each change is notified inside the transaction that makes it, so it
//! reaches listeners when, and only if, it commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_postgres::{AsyncMessage, Row};

use crate::{PgStore, StoreError, TapeBlock};

/// The channel every member listens on.
pub(crate) const CHANNEL: &str = "hearth_changes";

/// What changed, as every member hears it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// A function's versions or fallback mode changed, or it was removed.
    Function { tenant: String, name: String },
    /// A tenant's settings changed.
    Tenant { tenant: String },
    /// A tenant's secret was set or removed: code prepared with it is
    /// forgotten, so the next invocation reads the value now stored.
    Secret { tenant: String, name: String },
    /// A node joined or left.
    Members,
    /// The listener lost its connection and may have missed changes:
    /// forget everything cached. Never sent through PostgreSQL.
    Resync,
}

impl Change {
    pub(crate) fn payload(&self) -> String {
        serde_json::to_string(self).expect("a Change always serializes")
    }
}

/// Notifies `change` as part of `tx`.
pub(crate) async fn notify(
    tx: &tokio_postgres::Transaction<'_>,
    change: &Change,
) -> Result<(), tokio_postgres::Error> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &change.payload()])
        .await?;
    Ok(())
}

/// A node as its row says: what it offered at join and its last report.
#[derive(Debug, Clone)]
pub struct MemberRow {
    pub id: String,
    pub url: String,
    pub capacity_mib: u64,
    pub max_concurrency: Option<u32>,
    /// The node's last heartbeat (JSON, the cluster crate's `Heartbeat`).
    pub report: String,
    /// Heartbeats so far: a reader sees a new one by this number changing.
    pub beats: u64,
    /// How long ago its last heartbeat was, by the database's clock (so
    /// the members' clocks need not agree).
    pub beat_age: Duration,
    /// Whether it left (cleanly, on SIGTERM).
    pub left: bool,
}

fn member_of(r: &Row) -> MemberRow {
    MemberRow {
        id: r.get(0),
        url: r.get(1),
        capacity_mib: r.get::<_, i64>(2) as u64,
        max_concurrency: r.get::<_, Option<i64>>(3).map(|n| n as u32),
        report: r.get(4),
        beats: r.get::<_, i64>(5) as u64,
        beat_age: Duration::from_secs_f64(r.get::<_, f64>(6).max(0.0)),
        left: r.get(7),
    }
}

/// Tapes a node that left keeps on its machine, as its index said when it
/// left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AwayTapes {
    /// Where the node was reached; a node started there again serves them.
    pub node: String,
    pub tapes: u64,
    pub errors: u64,
    pub left_ms: i64,
}

/// Settings every member of the cluster follows, written by gateways
/// (from their own flags) and read by nodes at every heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterSettings {
    /// The default colocation mode (`Colocation::as_str`).
    pub colocation: Option<String>,
    /// How often nodes report, ms.
    pub heartbeat_ms: Option<u64>,
}

impl PgStore {
    /// Adds a node; its id is new every time (a node that restarts, or was
    /// forgotten, joins again under a new one).
    pub async fn member_join(
        &self,
        url: &str,
        capacity_mib: u64,
        max_concurrency: Option<u32>,
        report: &str,
    ) -> Result<String, StoreError> {
        let id = uuid_like();
        let (capacity, max) = (capacity_mib as i64, max_concurrency.map(i64::from));
        self.with(async |c| {
            let tx = c.transaction().await?;
            // A node that comes back on its address replaces its old row,
            // and serves the tapes left there again.
            tx.execute("DELETE FROM members WHERE url = $1", &[&url]).await?;
            tx.execute("DELETE FROM away_tapes WHERE node_url = $1", &[&url]).await?;
            tx.execute(
                "INSERT INTO members (id, url, capacity_mib, max_concurrency, report, beats, beat_at)
                 VALUES ($1, $2, $3, $4, $5, 0, now())",
                &[&id, &url, &capacity, &max, &report],
            ).await?;
            notify(&tx, &Change::Members).await?;
            tx.commit().await
        }).await?;
        Ok(id)
    }

    /// A node's heartbeat. `None` if its row is gone (it should join
    /// again); otherwise the cluster's settings, which it follows.
    pub async fn member_beat(
        &self,
        id: &str,
        report: &str,
    ) -> Result<Option<ClusterSettings>, StoreError> {
        let row = self
            .with(async |c| {
                c.query_opt(
                    "UPDATE members SET report = $2, beats = beats + 1, beat_at = now()
                 WHERE id = $1 AND left_at IS NULL
                 RETURNING (SELECT value FROM cluster_settings WHERE key = 'colocation'),
                           (SELECT value FROM cluster_settings WHERE key = 'heartbeat_ms')",
                    &[&id, &report],
                )
                .await
            })
            .await?;
        Ok(row.map(|r| ClusterSettings {
            colocation: r.get(0),
            heartbeat_ms: r.get::<_, Option<String>>(1).and_then(|v| v.parse().ok()),
        }))
    }

    /// A node leaves: every gateway hears it at once and places nothing
    /// more there. The row stays (marked) until [`sweep_members`](Self::sweep_members).
    pub async fn member_leave(&self, id: &str) -> Result<bool, StoreError> {
        self.with(async |c| {
            let tx = c.transaction().await?;
            let n = tx
                .execute(
                    "UPDATE members SET left_at = now() WHERE id = $1 AND left_at IS NULL",
                    &[&id],
                )
                .await?;
            notify(&tx, &Change::Members).await?;
            tx.commit().await?;
            Ok(n > 0)
        })
        .await
    }

    /// Records the tape index of the node at `url`, which is leaving
    /// (replacing what it handed over before). How many tapes.
    pub async fn hand_over_tapes(
        &self,
        url: &str,
        blocks: &[TapeBlock],
    ) -> Result<u64, StoreError> {
        let left_ms = hearth_core::unix_time_ms();
        self.with(async |c| {
            let tx = c.transaction().await?;
            tx.execute("DELETE FROM away_tapes WHERE node_url = $1", &[&url])
                .await?;
            let insert = tx
                .prepare(
                    "INSERT INTO away_tapes
                   (node_url, tenant, function, first_id, last_id, count, errors, left_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .await?;
            for b in blocks {
                tx.execute(
                    &insert,
                    &[
                        &url,
                        &b.tenant,
                        &b.function,
                        &b.first_id,
                        &b.last_id,
                        &i64::from(b.count),
                        &i64::from(b.errors),
                        &left_ms,
                    ],
                )
                .await?;
            }
            tx.commit().await
        })
        .await?;
        Ok(blocks.iter().map(|b| u64::from(b.count)).sum())
    }

    /// Tapes of tenant/function on machines whose nodes left, by node.
    pub async fn away_tapes(
        &self,
        tenant: &str,
        function: &str,
    ) -> Result<Vec<AwayTapes>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT node_url, SUM(count)::bigint, SUM(errors)::bigint, MAX(left_ms)
                 FROM away_tapes WHERE tenant = $1 AND function = $2
                 GROUP BY node_url ORDER BY node_url",
                    &[&tenant, &function],
                )
                .await
            })
            .await?;
        Ok(rows
            .iter()
            .map(|r| AwayTapes {
                node: r.get(0),
                tapes: r.get::<_, i64>(1) as u64,
                errors: r.get::<_, i64>(2) as u64,
                left_ms: r.get(3),
            })
            .collect())
    }

    /// Every node's row.
    pub async fn members(&self) -> Result<Vec<MemberRow>, StoreError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT id, url, capacity_mib, max_concurrency, report, beats,
                        EXTRACT(EPOCH FROM (now() - beat_at))::float8, left_at IS NOT NULL
                 FROM members ORDER BY url",
                    &[],
                )
                .await
            })
            .await?;
        Ok(rows.iter().map(member_of).collect())
    }

    /// Forgets nodes silent for longer than `after`.
    pub async fn sweep_members(&self, after: Duration) -> Result<u64, StoreError> {
        let secs = after.as_secs_f64();
        self.with(async |c| {
            c.execute(
                "DELETE FROM members WHERE beat_at < now() - make_interval(secs => $1)",
                &[&secs],
            )
            .await
        })
        .await
    }

    /// Writes the settings members follow (a gateway, at start).
    pub async fn set_cluster_settings(&self, settings: &ClusterSettings) -> Result<(), StoreError> {
        let pairs = [
            ("colocation", settings.colocation.clone()),
            ("heartbeat_ms", settings.heartbeat_ms.map(|n| n.to_string())),
        ];
        self.with(async |c| {
            let tx = c.transaction().await?;
            for (key, value) in &pairs {
                let Some(value) = value else { continue };
                tx.execute(
                    "INSERT INTO cluster_settings (key, value) VALUES ($1, $2)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    &[key, value],
                )
                .await?;
            }
            tx.commit().await
        })
        .await
    }

    /// Keeps `bytes` (whose sha256 is `hash`) for every member to fetch.
    pub async fn put_artifact(&self, hash: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.with(async |c| {
            c.execute(
                "INSERT INTO artifacts (sha256, bytes, created_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (sha256) DO NOTHING",
                &[&hash, &bytes, &hearth_core::unix_time_ms()],
            )
            .await
        })
        .await?;
        Ok(())
    }

    pub async fn get_artifact(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row = self
            .with(async |c| {
                c.query_opt("SELECT bytes FROM artifacts WHERE sha256 = $1", &[&hash])
                    .await
            })
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Removes artifacts no version refers to, once older than `min_age`
    /// (a deploy writes its artifact before its version).
    pub async fn sweep_artifacts(&self, min_age: Duration) -> Result<u64, StoreError> {
        let before = hearth_core::unix_time_ms() - min_age.as_millis() as i64;
        self.with(async |c| {
            c.execute(
                "DELETE FROM artifacts a WHERE a.created_ms < $1
                   AND NOT EXISTS (SELECT 1 FROM versions v WHERE v.artifact = a.sha256)",
                &[&before],
            )
            .await
        })
        .await
    }

    /// Hears every [`Change`] any member commits, in a task of its own
    /// with its own connection, until `stop` is set or the receiver is
    /// dropped. After a lost connection it sends [`Change::Resync`] once
    /// it is back, since whatever was notified meanwhile is lost.
    pub fn listen(&self, stop: Arc<AtomicBool>) -> tokio::sync::mpsc::Receiver<Change> {
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let config = self.config.clone();
        let tls = self.tls.clone();
        tokio::spawn(async move {
            let mut first = true;
            while !stop.load(Ordering::Acquire) && !tx.is_closed() {
                if let Err(e) = listen_once(&config, tls.clone(), &tx, &stop, first).await {
                    tracing::warn!(error = %e, "lost the change listener's connection; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                first = false;
            }
        });
        rx
    }
}

/// One connection's worth of [`PgStore::listen`]: `LISTEN`, then every
/// notification to `tx` until `stop`, the receiver goes, or the
/// connection fails (the error).
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    tx: &tokio::sync::mpsc::Sender<Change>,
    stop: &AtomicBool,
    first: bool,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls).await?;
    // The connection yields notifications as it is polled; a task polls
    // it (which also carries the client's `LISTEN`) and hands them over.
    let (heard, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if heard.send(n).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    if !first && tx.send(Change::Resync).await.is_err() {
        return Ok(());
    }
    while !stop.load(Ordering::Acquire) {
        let next = tokio::time::timeout(Duration::from_millis(500), notifications.recv()).await;
        match next {
            Ok(Some(n)) => match serde_json::from_str::<Change>(n.payload()) {
                Ok(change) => {
                    if tx.send(change).await.is_err() {
                        return Ok(());
                    }
                }
                Err(e) => tracing::warn!(error = %e, payload = n.payload(), "unreadable change"),
            },
            // A quiet half second: look at `stop` again.
            Err(_) => {}
            // The connection ended.
            Ok(None) => {
                drop(client);
                return match driver.await {
                    Ok(Err(e)) => Err(e),
                    _ => {
                        tracing::warn!("the change listener's connection closed");
                        Ok(())
                    }
                };
            }
        }
    }
    Ok(())
}

/// A random id (128 bits, hex), as the gateway's ids were.
fn uuid_like() -> String {
    let bits: [u8; 16] = rand::random();
    hex::encode(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_core::FunctionSpec;
    use hearth_test_support::TempPostgres;

    async fn next(rx: &mut tokio::sync::mpsc::Receiver<Change>) -> Option<Change> {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// Two members on one database: what one commits, the other hears;
    /// what one rolls back, nobody does.
    #[tokio::test]
    async fn members_share_nodes_artifacts_and_changes_through_postgres() {
        hearth_test_support::require!(Postgres);
        let pg = TempPostgres::start().unwrap();
        let url = pg.create_database("cluster").unwrap();
        let (a, b) = (
            PgStore::open(&url).await.unwrap(),
            PgStore::open(&url).await.unwrap(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let mut heard = b.listen(stop.clone());
        // LISTEN is in place once the listener's first connection is up:
        // a member's join is heard from then on.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let id = loop {
            let id = a
                .member_join("http://n1", 512, Some(8), "{}")
                .await
                .unwrap();
            if next(&mut heard).await == Some(Change::Members) {
                break id;
            }
            assert!(std::time::Instant::now() < deadline, "no change was heard");
        };

        a.create_tenant("t").await.unwrap();
        let spec = FunctionSpec::new(hearth_core::Runtime::Wasm);
        a.create_version("t", "f", "aa", &spec, true).await.unwrap();
        let f = Change::Function {
            tenant: "t".into(),
            name: "f".into(),
        };
        assert_eq!(next(&mut heard).await, Some(f.clone()));
        a.record_bounce("t", "f", 3).await.unwrap();
        assert_eq!(next(&mut heard).await, Some(f.clone()));
        a.set_tenant_colocation("t", Some(hearth_core::Colocation::None))
            .await
            .unwrap();
        assert_eq!(
            next(&mut heard).await,
            Some(Change::Tenant { tenant: "t".into() })
        );
        assert!(a.delete_function("t", "f").await.unwrap());
        assert_eq!(next(&mut heard).await, Some(f));
        // A change rolled back is not heard: notifications go with the
        // commit.
        a.with(async |c| {
            let tx = c.transaction().await?;
            notify(&tx, &Change::Tenant { tenant: "x".into() }).await?;
            tx.rollback().await
        })
        .await
        .unwrap();
        a.member_leave("nobody").await.unwrap();
        assert_eq!(
            next(&mut heard).await,
            Some(Change::Members),
            "only the leave"
        );

        // The node's row: beats count up and carry the cluster's settings.
        assert_eq!(
            a.member_beat(&id, r#"{"in_flight":1}"#).await.unwrap(),
            Some(ClusterSettings::default())
        );
        let settings = ClusterSettings {
            colocation: Some("full".into()),
            heartbeat_ms: Some(200),
        };
        b.set_cluster_settings(&settings).await.unwrap();
        assert_eq!(a.member_beat(&id, "{}").await.unwrap(), Some(settings));
        let rows = b.members().await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].beats, rows[0].left), (2, false));
        assert!(rows[0].beat_age < Duration::from_secs(5));
        assert_eq!(rows[0].max_concurrency, Some(8));
        // Rejoining on the same address replaces the row.
        let id2 = a.member_join("http://n1", 512, None, "{}").await.unwrap();
        assert_eq!(b.members().await.unwrap().len(), 1);
        assert_eq!(
            a.member_beat(&id, "{}").await.unwrap(),
            None,
            "the old id is gone"
        );
        assert!(a.member_leave(&id2).await.unwrap());
        assert!(b.members().await.unwrap()[0].left);
        assert_eq!(
            a.member_beat(&id2, "{}").await.unwrap(),
            None,
            "a node that left"
        );
        assert_eq!(b.sweep_members(Duration::from_secs(60)).await.unwrap(), 0);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(b.sweep_members(Duration::from_millis(1)).await.unwrap(), 1);

        // Artifacts: by hash, kept while a version refers to them.
        a.put_artifact("h1", b"one").await.unwrap();
        a.put_artifact("h2", b"two").await.unwrap();
        a.create_version(
            "t",
            "g",
            "h2",
            &FunctionSpec::new(hearth_core::Runtime::Wasm),
            true,
        )
        .await
        .unwrap();
        assert_eq!(
            b.get_artifact("h1").await.unwrap().as_deref(),
            Some(&b"one"[..])
        );
        assert_eq!(
            b.sweep_artifacts(Duration::from_secs(60)).await.unwrap(),
            0,
            "too new"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(b.sweep_artifacts(Duration::ZERO).await.unwrap(), 1);
        assert_eq!(b.get_artifact("h1").await.unwrap(), None);
        assert!(b.get_artifact("h2").await.unwrap().is_some());

        // A leaving node's tape index: summed by node, cleared when a node
        // joins at that address again.
        let block = |function: &str, count, errors| TapeBlock {
            tenant: "t".into(),
            function: function.into(),
            segment: 1,
            offset: 0,
            first_id: "a".into(),
            last_id: "b".into(),
            first_ms: 1,
            last_ms: 2,
            count,
            errors,
            min_version: 1,
            max_version: 1,
            ok_expired: false,
        };
        let blocks = [block("f", 3, 1), block("f", 2, 0), block("g", 7, 0)];
        assert_eq!(a.hand_over_tapes("http://n2", &blocks).await.unwrap(), 12);
        let away = b.away_tapes("t", "f").await.unwrap();
        assert_eq!(away.len(), 1);
        assert_eq!(
            (away[0].node.as_str(), away[0].tapes, away[0].errors),
            ("http://n2", 5, 1)
        );
        assert!(
            b.away_tapes("u", "f").await.unwrap().is_empty(),
            "another tenant's"
        );
        a.member_join("http://n2", 512, None, "{}").await.unwrap();
        assert!(
            b.away_tapes("t", "f").await.unwrap().is_empty(),
            "served again"
        );
        stop.store(true, Ordering::Release);
    }
}
