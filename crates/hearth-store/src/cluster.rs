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

use postgres::fallible_iterator::FallibleIterator;
use postgres::{NoTls, Row};
use serde::{Deserialize, Serialize};

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
pub(crate) fn notify(
    tx: &mut postgres::Transaction<'_>,
    change: &Change,
) -> Result<(), postgres::Error> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &change.payload()])?;
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
    pub fn member_join(
        &self,
        url: &str,
        capacity_mib: u64,
        max_concurrency: Option<u32>,
        report: &str,
    ) -> Result<String, StoreError> {
        let id = uuid_like();
        let (capacity, max) = (capacity_mib as i64, max_concurrency.map(i64::from));
        self.with(|c| {
            let mut tx = c.transaction()?;
            // A node that comes back on its address replaces its old row,
            // and serves the tapes left there again.
            tx.execute("DELETE FROM members WHERE url = $1", &[&url])?;
            tx.execute("DELETE FROM away_tapes WHERE node_url = $1", &[&url])?;
            tx.execute(
                "INSERT INTO members (id, url, capacity_mib, max_concurrency, report, beats, beat_at)
                 VALUES ($1, $2, $3, $4, $5, 0, now())",
                &[&id, &url, &capacity, &max, &report],
            )?;
            notify(&mut tx, &Change::Members)?;
            tx.commit()
        })?;
        Ok(id)
    }

    /// A node's heartbeat. `None` if its row is gone (it should join
    /// again); otherwise the cluster's settings, which it follows.
    pub fn member_beat(
        &self,
        id: &str,
        report: &str,
    ) -> Result<Option<ClusterSettings>, StoreError> {
        let row = self.with(|c| {
            c.query_opt(
                "UPDATE members SET report = $2, beats = beats + 1, beat_at = now()
                 WHERE id = $1 AND left_at IS NULL
                 RETURNING (SELECT value FROM cluster_settings WHERE key = 'colocation'),
                           (SELECT value FROM cluster_settings WHERE key = 'heartbeat_ms')",
                &[&id, &report],
            )
        })?;
        Ok(row.map(|r| ClusterSettings {
            colocation: r.get(0),
            heartbeat_ms: r.get::<_, Option<String>>(1).and_then(|v| v.parse().ok()),
        }))
    }

    /// A node leaves: every gateway hears it at once and places nothing
    /// more there. The row stays (marked) until [`sweep_members`](Self::sweep_members).
    pub fn member_leave(&self, id: &str) -> Result<bool, StoreError> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE members SET left_at = now() WHERE id = $1 AND left_at IS NULL",
                &[&id],
            )?;
            notify(&mut tx, &Change::Members)?;
            tx.commit()?;
            Ok(n > 0)
        })
    }

    /// Records the tape index of the node at `url`, which is leaving
    /// (replacing what it handed over before). How many tapes.
    pub fn hand_over_tapes(&self, url: &str, blocks: &[TapeBlock]) -> Result<u64, StoreError> {
        let left_ms = hearth_core::unix_time_ms();
        self.with(|c| {
            let mut tx = c.transaction()?;
            tx.execute("DELETE FROM away_tapes WHERE node_url = $1", &[&url])?;
            let insert = tx.prepare(
                "INSERT INTO away_tapes
                   (node_url, tenant, function, first_id, last_id, count, errors, left_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )?;
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
                )?;
            }
            tx.commit()
        })?;
        Ok(blocks.iter().map(|b| u64::from(b.count)).sum())
    }

    /// Tapes of tenant/function on machines whose nodes left, by node.
    pub fn away_tapes(&self, tenant: &str, function: &str) -> Result<Vec<AwayTapes>, StoreError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT node_url, SUM(count)::bigint, SUM(errors)::bigint, MAX(left_ms)
                 FROM away_tapes WHERE tenant = $1 AND function = $2
                 GROUP BY node_url ORDER BY node_url",
                &[&tenant, &function],
            )
        })?;
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
    pub fn members(&self) -> Result<Vec<MemberRow>, StoreError> {
        let rows = self.with(|c| {
            c.query(
                "SELECT id, url, capacity_mib, max_concurrency, report, beats,
                        EXTRACT(EPOCH FROM (now() - beat_at))::float8, left_at IS NOT NULL
                 FROM members ORDER BY url",
                &[],
            )
        })?;
        Ok(rows.iter().map(member_of).collect())
    }

    /// Forgets nodes silent for longer than `after`.
    pub fn sweep_members(&self, after: Duration) -> Result<u64, StoreError> {
        let secs = after.as_secs_f64();
        self.with(|c| {
            c.execute(
                "DELETE FROM members WHERE beat_at < now() - make_interval(secs => $1)",
                &[&secs],
            )
        })
    }

    /// Writes the settings members follow (a gateway, at start).
    pub fn set_cluster_settings(&self, settings: &ClusterSettings) -> Result<(), StoreError> {
        let pairs = [
            ("colocation", settings.colocation.clone()),
            ("heartbeat_ms", settings.heartbeat_ms.map(|n| n.to_string())),
        ];
        self.with(|c| {
            let mut tx = c.transaction()?;
            for (key, value) in &pairs {
                let Some(value) = value else { continue };
                tx.execute(
                    "INSERT INTO cluster_settings (key, value) VALUES ($1, $2)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    &[key, value],
                )?;
            }
            tx.commit()
        })
    }

    /// Keeps `bytes` (whose sha256 is `hash`) for every member to fetch.
    pub fn put_artifact(&self, hash: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO artifacts (sha256, bytes, created_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (sha256) DO NOTHING",
                &[&hash, &bytes, &hearth_core::unix_time_ms()],
            )
        })?;
        Ok(())
    }

    pub fn get_artifact(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row =
            self.with(|c| c.query_opt("SELECT bytes FROM artifacts WHERE sha256 = $1", &[&hash]))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Removes artifacts no version refers to, once older than `min_age`
    /// (a deploy writes its artifact before its version).
    pub fn sweep_artifacts(&self, min_age: Duration) -> Result<u64, StoreError> {
        let before = hearth_core::unix_time_ms() - min_age.as_millis() as i64;
        self.with(|c| {
            c.execute(
                "DELETE FROM artifacts a WHERE a.created_ms < $1
                   AND NOT EXISTS (SELECT 1 FROM versions v WHERE v.artifact = a.sha256)",
                &[&before],
            )
        })
    }

    /// Hears every [`Change`] any member commits, on a thread of its own
    /// with its own connection, until `stop` is set. After a lost
    /// connection it sends [`Change::Resync`] once it is back, since
    /// whatever was notified meanwhile is lost.
    pub fn listen(&self, stop: Arc<AtomicBool>) -> tokio::sync::mpsc::Receiver<Change> {
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let config = self.config.clone();
        std::thread::Builder::new()
            .name("hearth-listen".into())
            .spawn(move || {
                let mut first = true;
                while !stop.load(Ordering::Acquire) && !tx.is_closed() {
                    let mut client = match config.connect(NoTls) {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot listen for cluster changes; retrying");
                            std::thread::sleep(Duration::from_secs(1));
                            continue;
                        }
                    };
                    if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")) {
                        tracing::warn!(error = %e, "LISTEN failed; retrying");
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    }
                    if !first && tx.blocking_send(Change::Resync).is_err() {
                        return;
                    }
                    first = false;
                    while !stop.load(Ordering::Acquire) {
                        let next = client
                            .notifications()
                            .timeout_iter(Duration::from_millis(500))
                            .next();
                        match next {
                            Ok(Some(n)) => match serde_json::from_str::<Change>(n.payload()) {
                                Ok(change) => {
                                    if tx.blocking_send(change).is_err() {
                                        return;
                                    }
                                }
                                Err(e) => tracing::warn!(error = %e, payload = n.payload(), "unreadable change"),
                            },
                            // A timeout, or the connection closed.
                            Ok(None) if !client.is_closed() => {}
                            Ok(None) => {
                                tracing::warn!("lost the change listener's connection");
                                break;
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "lost the change listener's connection");
                                break;
                            }
                        }
                    }
                }
            })
            .expect("starting the change listener");
        rx
    }
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

    fn next(rx: &mut tokio::sync::mpsc::Receiver<Change>) -> Option<Change> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            match rx.try_recv() {
                Ok(c) => return Some(c),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty)
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(_) => return None,
            }
        }
    }

    /// Two members on one database: what one commits, the other hears;
    /// what one rolls back, nobody does.
    #[test]
    fn members_share_nodes_artifacts_and_changes_through_postgres() {
        hearth_test_support::require!(Postgres);
        let pg = TempPostgres::start().unwrap();
        let url = pg.create_database("cluster").unwrap();
        let (a, b) = (PgStore::open(&url).unwrap(), PgStore::open(&url).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let mut heard = b.listen(stop.clone());
        // LISTEN is in place once the listener's first connection is up:
        // a member's join is heard from then on.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let id = loop {
            let id = a.member_join("http://n1", 512, Some(8), "{}").unwrap();
            if next(&mut heard) == Some(Change::Members) {
                break id;
            }
            assert!(std::time::Instant::now() < deadline, "no change was heard");
        };

        a.create_tenant("t").unwrap();
        let spec = FunctionSpec::new(hearth_core::Runtime::Wasm);
        a.create_version("t", "f", "aa", &spec).unwrap();
        let f = Change::Function {
            tenant: "t".into(),
            name: "f".into(),
        };
        assert_eq!(next(&mut heard), Some(f.clone()));
        a.record_bounce("t", "f", 3).unwrap();
        assert_eq!(next(&mut heard), Some(f.clone()));
        a.set_tenant_colocation("t", Some(hearth_core::Colocation::None))
            .unwrap();
        assert_eq!(
            next(&mut heard),
            Some(Change::Tenant { tenant: "t".into() })
        );
        assert!(a.delete_function("t", "f").unwrap());
        assert_eq!(next(&mut heard), Some(f));
        // A change rolled back is not heard: notifications go with the
        // commit.
        a.with(|c| {
            let mut tx = c.transaction()?;
            notify(&mut tx, &Change::Tenant { tenant: "x".into() })?;
            tx.rollback()
        })
        .unwrap();
        a.member_leave("nobody").unwrap();
        assert_eq!(next(&mut heard), Some(Change::Members), "only the leave");

        // The node's row: beats count up and carry the cluster's settings.
        assert_eq!(
            a.member_beat(&id, r#"{"in_flight":1}"#).unwrap(),
            Some(ClusterSettings::default())
        );
        let settings = ClusterSettings {
            colocation: Some("full".into()),
            heartbeat_ms: Some(200),
        };
        b.set_cluster_settings(&settings).unwrap();
        assert_eq!(a.member_beat(&id, "{}").unwrap(), Some(settings));
        let rows = b.members().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].beats, rows[0].left), (2, false));
        assert!(rows[0].beat_age < Duration::from_secs(5));
        assert_eq!(rows[0].max_concurrency, Some(8));
        // Rejoining on the same address replaces the row.
        let id2 = a.member_join("http://n1", 512, None, "{}").unwrap();
        assert_eq!(b.members().unwrap().len(), 1);
        assert_eq!(
            a.member_beat(&id, "{}").unwrap(),
            None,
            "the old id is gone"
        );
        assert!(a.member_leave(&id2).unwrap());
        assert!(b.members().unwrap()[0].left);
        assert_eq!(a.member_beat(&id2, "{}").unwrap(), None, "a node that left");
        assert_eq!(b.sweep_members(Duration::from_secs(60)).unwrap(), 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(b.sweep_members(Duration::from_millis(1)).unwrap(), 1);

        // Artifacts: by hash, kept while a version refers to them.
        a.put_artifact("h1", b"one").unwrap();
        a.put_artifact("h2", b"two").unwrap();
        a.create_version(
            "t",
            "g",
            "h2",
            &FunctionSpec::new(hearth_core::Runtime::Wasm),
        )
        .unwrap();
        assert_eq!(b.get_artifact("h1").unwrap().as_deref(), Some(&b"one"[..]));
        assert_eq!(
            b.sweep_artifacts(Duration::from_secs(60)).unwrap(),
            0,
            "too new"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(b.sweep_artifacts(Duration::ZERO).unwrap(), 1);
        assert_eq!(b.get_artifact("h1").unwrap(), None);
        assert!(b.get_artifact("h2").unwrap().is_some());

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
        assert_eq!(a.hand_over_tapes("http://n2", &blocks).unwrap(), 12);
        let away = b.away_tapes("t", "f").unwrap();
        assert_eq!(away.len(), 1);
        assert_eq!(
            (away[0].node.as_str(), away[0].tapes, away[0].errors),
            ("http://n2", 5, 1)
        );
        assert!(
            b.away_tapes("u", "f").unwrap().is_empty(),
            "another tenant's"
        );
        a.member_join("http://n2", 512, None, "{}").unwrap();
        assert!(b.away_tapes("t", "f").unwrap().is_empty(), "served again");
        stop.store(true, Ordering::Release);
    }
}
