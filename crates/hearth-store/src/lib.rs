//! Hearth's durable state: the registry (tenants, tokens, functions and their
//! versions), content-addressed artifacts, per-function KV, and function logs.
//!
//! The [`Store`] trait is the one interface the node and the API use;
//! [`SqliteStore`] is the single-node backend (WAL mode, one file in the data
//! directory). In a cluster, [`SplitStore`] implements the same trait with
//! the shared state in PostgreSQL ([`PgStore`]) and the node's own tape
//! index in its SQLite.
//! Artifacts are plain files named by their sha256 in [`ArtifactStore`]:
//! written to a temporary name, synced, then renamed, so a crash never leaves
//! a half-written artifact under a real name and the registry only ever points
//! at artifacts that are already complete on disk.
//!
//! What this crate is not: a cache. The node keeps its own in-memory function
//! table; nothing here sits on the per-invocation hot path except KV.

mod artifacts;
mod cluster;
#[cfg(test)]
mod conformance;
mod error;
mod events;
mod migrations;
mod postgres;
mod secrets;
mod split;
mod sqlite;
mod tokens;

use hearth_core::{Colocation, FunctionSpec, FunctionVersion};
use serde::{Deserialize, Serialize};

pub use hearth_core::LogStream;

pub use artifacts::{ArtifactStore, sha256_hex, write_atomically, write_secret};
pub use cluster::{AwayTapes, Change, ClusterSettings, MemberRow};
pub use error::StoreError;
pub use events::{
    Claimed, DeadLetter, Enqueue, Fired, MAX_DEAD_PER_FUNCTION, MAX_SCHEDULES_PER_FUNCTION,
    MAX_TRIGGERS_PER_FUNCTION, MAX_TRIGGERS_PER_TENANT, QueueDepth, ScheduleRow, Settle,
    TriggerRow,
};
pub use postgres::PgStore;
pub use postgres::role_identifier;
pub use secrets::{MAX_SEALED_SECRET_BYTES, MAX_SECRETS_PER_TENANT, SecretInfo};
pub use split::SplitStore;
pub use sqlite::SqliteStore;
pub use tokens::{Grant, MAX_TOKENS_PER_TENANT, Principal, Scope};

/// A function as listed: its newest version, the one live, and how many
/// it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FunctionSummary {
    pub name: String,
    pub latest: FunctionVersion,
    /// The version `live` points at (none: no version is live yet).
    #[serde(default)]
    pub live: Option<u32>,
    /// The share of `live`'s calls another version takes, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_split: Option<Split>,
    pub versions: u32,
    /// Where a JavaScript function runs (see [`FunctionMode`]).
    #[serde(flatten)]
    pub mode: FunctionMode,
}

/// The operator's tenant: the one tenant whose tokens may have scope
/// admin.
pub const ADMIN_TENANT: &str = "admin";

/// The alias an unpinned invocation runs.
pub const LIVE: &str = "live";

/// How many aliases one function may have (`live` included).
pub const MAX_ALIASES_PER_FUNCTION: u32 = 32;
/// How many moves an alias's history keeps (the oldest go): a rollback
/// reaches back at most this far.
pub const MAX_MOVES_PER_ALIAS: u32 = 1000;

/// One of a function's aliases and the version it points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Alias {
    pub alias: String,
    pub version: u32,
    /// A share of the alias's calls that goes to another version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
}

/// `percent` of an alias's calls go to `version` (the rest to the
/// alias's own version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Split {
    pub version: u32,
    /// 1 to 99.
    pub percent: u8,
}

/// One move of an alias, as its history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AliasMove {
    /// The move's place in the history (rising).
    pub id: i64,
    pub alias: String,
    /// Where the alias points after the move.
    pub version: u32,
    /// Its split after the move, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
    /// Where it pointed before (none: the move made it).
    pub previous: Option<u32>,
    /// Its split before the move, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_split: Option<Split>,
    /// Whether the move was a rollback.
    pub rollback: bool,
    pub at_ms: i64,
}

/// How often a JavaScript function fell back from the isolate tier to the
/// process tier since its newest deploy, and whether it is now pinned there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FunctionMode {
    pub bounces: u32,
    pub pinned: bool,
}

/// One line of a function's log, tied to the invocation that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogRecord {
    /// The line's place in the store, rising as lines are written (0 in a
    /// line not yet stored): a reader following a log asks for lines after
    /// the last one it saw.
    #[serde(default)]
    pub id: i64,
    pub tenant: String,
    pub function: String,
    pub version: u32,
    pub invocation_id: String,
    pub ts_ms: i64,
    pub stream: LogStream,
    /// `info`, `warn`, `error`, … for host log calls; empty for stderr.
    pub level: String,
    pub message: String,
    /// The invocation's OpenTelemetry trace (32 hex digits), when the node
    /// exports traces (docs/observability.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// Which log lines to read.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub invocation_id: Option<String>,
    /// Newest lines first, at most this many; the result is returned oldest first.
    pub limit: u32,
    /// Only lines stored after the line with this id; then the oldest of
    /// them first, at most `limit` (a follower's next page).
    pub after: Option<i64>,
}

/// What a listing shows of one tape. Built from the tape itself (see
/// `hearth-record`): the index holds one [`TapeBlock`] per block and
/// function, not a row per invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TapeEntry {
    /// The invocation id (UUIDv7, hex): sorts by start time.
    pub id: String,
    pub tenant: String,
    pub function: String,
    pub version: u32,
    pub tier: String,
    pub started_ms: i64,
    pub duration_us: i64,
    /// The HTTP status the caller got.
    pub status: u16,
    /// `ok`, or the failure's kind (`timeout`, `trap`, …).
    pub outcome: String,
    pub segment: u64,
    /// Byte offset of the block holding the tape.
    pub offset: u64,
}

/// The index row of one function's tapes in one block (one tenant's flush
/// interval): enough to find a tape by id, list newest first, filter and
/// expire, at one row per function per flush instead of one per
/// invocation — per-invocation rows were most of the recorder's cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapeBlock {
    pub tenant: String,
    pub function: String,
    pub segment: u64,
    /// Byte offset of the block in its segment.
    pub offset: u64,
    /// Lowest and highest invocation id among these tapes (UUIDv7 hex,
    /// which sorts by start time).
    pub first_id: String,
    pub last_id: String,
    /// Earliest and latest start time, ms since the epoch.
    pub first_ms: i64,
    pub last_ms: i64,
    pub count: u32,
    /// How many of `count` failed.
    pub errors: u32,
    pub min_version: u32,
    pub max_version: u32,
    /// Retention expired the successful tapes; the failures are still kept.
    pub ok_expired: bool,
}

/// A tape kept past its retention: one that showed a function's compiled
/// code answering otherwise than the isolate (`docs/js-tier.md`), kept so
/// that `hearth replay <id>` can show why. Its block is kept while the
/// function exists, and counts in its tenant's room (whose cap can still
/// take it); a function keeps its newest [`MAX_PINS_PER_FUNCTION`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapePin {
    pub tenant: String,
    pub function: String,
    pub id: String,
}

/// How many pinned tapes a function keeps (the oldest is unpinned).
pub const MAX_PINS_PER_FUNCTION: u32 = 8;

/// Which blocks to list, newest `last_id` first.
#[derive(Debug, Clone, Default)]
pub struct BlockQuery {
    pub function: Option<String>,
    /// Only blocks holding a failure that is still kept.
    pub errors_only: bool,
    /// Only blocks with a tape started at or after this.
    pub since_ms: Option<i64>,
    /// Only blocks that may hold this version.
    pub version: Option<u32>,
    /// Only blocks that may hold a tape older than this invocation (its
    /// id).
    pub before: Option<String>,
    /// Keyset cursor: only blocks ordered after this one.
    pub after: Option<BlockCursor>,
    /// At most this many.
    pub limit: u32,
}

/// A block's place in [`BlockQuery`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockCursor {
    pub last_id: String,
    pub segment: u64,
    pub offset: u64,
    pub function: String,
}

impl TapeBlock {
    pub fn cursor(&self) -> BlockCursor {
        BlockCursor {
            last_id: self.last_id.clone(),
            segment: self.segment,
            offset: self.offset,
            function: self.function.clone(),
        }
    }
}

/// A large payload stored once per tenant and segment, by content hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobEntry {
    pub tenant: String,
    /// sha256 of the payload, hex.
    pub hash: String,
    pub segment: u64,
    pub offset: u64,
}

/// Which tapes to list: newest first.
#[derive(Debug, Clone, Default)]
pub struct TapeQuery {
    pub function: Option<String>,
    /// Only failed invocations.
    pub errors_only: bool,
    /// Only this HTTP status.
    pub status: Option<u16>,
    pub since_ms: Option<i64>,
    pub version: Option<u32>,
    /// Only invocations that took at least this long.
    pub min_duration_us: Option<u64>,
    /// Only invocations in this trace (32 hex digits, lower case): its
    /// caller's, or the one it began.
    pub trace_id: Option<String>,
    /// Only invocations older than this one (its id): the next page after
    /// a listing whose oldest this was.
    pub before: Option<String>,
    /// At most this many (0: 100).
    pub limit: u32,
}

/// Whose retry journal: one invocation of one tenant's function.
#[derive(Debug, Clone, Copy)]
pub struct JournalKey<'a> {
    pub tenant: &'a str,
    pub function: &'a str,
    /// The invocation id the gateway gave it (the same on a retry).
    pub invocation: &'a str,
}

/// Refuses a split that is not one: a share of 1–99% to a version other
/// than the alias's own.
pub(crate) fn check_split(version: u32, split: Option<Split>) -> Result<(), StoreError> {
    match split {
        Some(s) if !(1..=99).contains(&s.percent) => Err(StoreError::BadSplit(format!(
            "a split sends 1 to 99 percent of calls to the other version, not {}",
            s.percent
        ))),
        Some(s) if s.version == version => Err(StoreError::BadSplit(format!(
            "a split needs a second version: {version} is the alias's own"
        ))),
        _ => Ok(()),
    }
}

/// A split as its columns hold it (both or neither).
pub(crate) fn split_of(version: Option<u32>, percent: Option<u8>) -> Option<Split> {
    Some(Split {
        version: version?,
        percent: percent?,
    })
}

/// A stored colocation mode (`NULL`: no override).
fn parse_colocation(text: Option<String>) -> Result<Option<Colocation>, StoreError> {
    text.map(|t| t.parse().map_err(StoreError::Corrupt))
        .transpose()
}

/// The durable state behind one Hearth node (or a cluster's gateway):
/// what must outlive it and, in a cluster, is shared.
///
/// Calls are async: PostgreSQL's are queries on the runtime's own sockets,
/// SQLite's run on a blocking thread, so no caller steps off the runtime
/// itself. (`async_trait`: the node holds the store as `Arc<dyn Store>`.)
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    // -- tenants and tokens --
    async fn create_tenant(&self, name: &str) -> Result<(), StoreError>;
    async fn tenant_exists(&self, name: &str) -> Result<bool, StoreError>;
    /// Makes a new random token for `tenant` with `grant` and returns it
    /// (shown once: only its hash is kept) and what the store knows of it.
    async fn create_token(
        &self,
        tenant: &str,
        grant: &Grant,
    ) -> Result<(String, Principal), StoreError> {
        let token = tokens::new_token();
        let made = self.add_token(tenant, grant, &token).await?;
        Ok((token, made))
    }
    /// Makes `token` (one the operator chose, e.g. from a Kubernetes
    /// Secret) a token of `tenant`; only its hash is kept. Adding a token
    /// again is a no-op; one that is another tenant's or scope's is
    /// refused, as is a tenant's token past [`MAX_TOKENS_PER_TENANT`].
    async fn add_token(
        &self,
        tenant: &str,
        grant: &Grant,
        token: &str,
    ) -> Result<Principal, StoreError>;
    /// The tenant's tokens, oldest first (never their secrets).
    async fn tokens(&self, tenant: &str) -> Result<Vec<Principal>, StoreError>;
    /// Removes the tenant's token `id`: from then on it authenticates as
    /// nothing. [`StoreError::NoSuchToken`] if the tenant has none such.
    async fn revoke_token(&self, tenant: &str, id: &str) -> Result<Principal, StoreError>;
    /// Replaces the tenant's token `id` by a new random one with the same
    /// grant, in one transaction: the old stops as the new starts.
    async fn rotate_token(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<(String, Principal), StoreError> {
        let token = tokens::new_token();
        let made = self.replace_token(tenant, id, &token).await?;
        Ok((token, made))
    }
    /// [`rotate_token`](Self::rotate_token) with the new token given.
    async fn replace_token(
        &self,
        tenant: &str,
        id: &str,
        token: &str,
    ) -> Result<Principal, StoreError>;
    /// The tenant's own colocation mode, if it overrides the cluster's.
    async fn tenant_colocation(&self, tenant: &str) -> Result<Option<Colocation>, StoreError>;
    /// Sets (or, with `None`, clears) the tenant's override; fails with
    /// [`StoreError::NoSuchTenant`] for an unknown tenant.
    async fn set_tenant_colocation(
        &self,
        tenant: &str,
        mode: Option<Colocation>,
    ) -> Result<(), StoreError>;
    async fn authenticate(&self, token: &str) -> Result<Option<Principal>, StoreError>;

    // -- secrets --
    /// Sets the tenant's secret `name` to `sealed` (made or replaced);
    /// whether it is new. Past [`MAX_SECRETS_PER_TENANT`] a new one is
    /// refused. In a cluster every member hears it ([`Change::Secret`]).
    async fn put_secret(&self, tenant: &str, name: &str, sealed: &[u8])
    -> Result<bool, StoreError>;
    /// The tenant's secrets by name (never their values).
    async fn secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>, StoreError>;
    /// The sealed value of the tenant's secret `name`, if it has one.
    async fn sealed_secret(&self, tenant: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Removes the tenant's secret `name`; whether it had one.
    async fn remove_secret(&self, tenant: &str, name: &str) -> Result<bool, StoreError>;

    // -- functions --
    /// Records a new version of `name` (creating the function if new) whose
    /// code is the already-stored artifact `artifact`, and with `promote`
    /// points [`LIVE`] at it. Atomic.
    async fn create_version(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        spec: &FunctionSpec,
        promote: bool,
    ) -> Result<FunctionVersion, StoreError>;
    /// The version [`LIVE`] points at (none if no version is live), or
    /// the given one.
    async fn get_version(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<FunctionVersion>, StoreError>;
    /// `alias` of the function: where it points, and its split.
    async fn alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<Alias>, StoreError>;
    /// The version `alias` points at.
    async fn alias_version(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<FunctionVersion>, StoreError>;
    /// The function's aliases, by name.
    async fn aliases(&self, tenant: &str, name: &str) -> Result<Vec<Alias>, StoreError>;
    /// Points `alias` (made if new) at `version`, which must exist
    /// ([`StoreError::NoSuchVersion`]); the move joins the alias's
    /// history, which keeps its newest [`MAX_MOVES_PER_ALIAS`]. With
    /// `split`, that share of its calls goes to another existing version
    /// (1–99%, not its own: [`StoreError::BadSplit`]). A new
    /// alias past [`MAX_ALIASES_PER_FUNCTION`] is refused
    /// ([`StoreError::TooManyAliases`]). Atomic.
    async fn set_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        version: u32,
        split: Option<Split>,
    ) -> Result<AliasMove, StoreError>;
    /// Points `alias` back where it was before the move that made its
    /// current version; again, and it goes further back (each rollback
    /// undoes one move). [`StoreError::NothingToRollBack`] at the start
    /// of its history. Atomic.
    async fn rollback_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<AliasMove, StoreError>;
    /// Removes `alias` and its history; false if there was none. `live`
    /// is refused ([`StoreError::LiveAlias`]): point it elsewhere instead.
    async fn remove_alias(&self, tenant: &str, name: &str, alias: &str)
    -> Result<bool, StoreError>;
    /// The alias's moves, newest first, at most `limit`.
    async fn alias_moves(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        limit: u32,
    ) -> Result<Vec<AliasMove>, StoreError>;
    async fn list_functions(&self, tenant: &str) -> Result<Vec<FunctionSummary>, StoreError>;
    async fn list_versions(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Vec<FunctionVersion>, StoreError>;
    /// Deletes the function, its versions, aliases, KV and logs. False if
    /// it did not exist.
    async fn delete_function(&self, tenant: &str, name: &str) -> Result<bool, StoreError>;
    /// The function's fallback record; reset by every deploy.
    async fn function_mode(&self, tenant: &str, name: &str) -> Result<FunctionMode, StoreError>;
    /// Counts one fallback; pins the function once it has `pin_after`.
    async fn record_bounce(
        &self,
        tenant: &str,
        name: &str,
        pin_after: u32,
    ) -> Result<FunctionMode, StoreError>;
    /// Every artifact hash some version still points at.
    async fn referenced_artifacts(&self) -> Result<Vec<String>, StoreError>;

    // -- KV, scoped to one tenant's function --
    async fn kv_get(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError>;
    /// Whether `key` holds a value, without reading the value.
    async fn kv_exists(&self, tenant: &str, function: &str, key: &[u8])
    -> Result<bool, StoreError>;
    /// Sets `key`, unless the tenant's KV (keys and values of all its
    /// functions) would then hold more than `max_tenant_bytes`:
    /// [`StoreError::KvQuota`], and nothing changed.
    async fn kv_set(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        value: &[u8],
        max_tenant_bytes: u64,
    ) -> Result<(), StoreError>;
    /// Adds `delta` to the counter at `key` (a decimal number as text; an
    /// absent key counts from 0) in one transaction, and returns the new
    /// value. [`StoreError::KvNotACounter`] if the value is not a number or
    /// would overflow; [`StoreError::KvQuota`] as for `kv_set`.
    async fn kv_increment(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        delta: u64,
        max_tenant_bytes: u64,
    ) -> Result<u64, StoreError>;
    /// Bytes of keys and values the tenant's KV holds.
    async fn kv_bytes(&self, tenant: &str) -> Result<u64, StoreError>;
    async fn kv_delete(&self, tenant: &str, function: &str, key: &[u8])
    -> Result<bool, StoreError>;
    async fn kv_list(
        &self,
        tenant: &str,
        function: &str,
        prefix: &[u8],
        limit: u32,
    ) -> Result<Vec<Vec<u8>>, StoreError>;

    // -- retry journals (clusters) --
    /// Appends event `seq` (encoded by the host) to `key`'s journal: the
    /// answers an invocation got from KV and HTTP, written before the
    /// function sees them, so a retry on another node can be given the
    /// same answers if this node dies. Appending a `seq` twice keeps the first.
    async fn journal_append(
        &self,
        key: &JournalKey<'_>,
        seq: u32,
        event: &[u8],
    ) -> Result<(), StoreError>;
    /// `key`'s journal, in order.
    async fn journal_read(&self, key: &JournalKey<'_>) -> Result<Vec<Vec<u8>>, StoreError>;
    /// Forgets `key`'s journal: the invocation finished.
    async fn journal_forget(&self, key: &JournalKey<'_>) -> Result<(), StoreError>;
    /// Cuts `key`'s journal before entry `from_seq`: a queued invocation's
    /// retry keeps what its earlier attempts got up to their first failed
    /// answer, and journals its own from there.
    async fn journal_cut(&self, key: &JournalKey<'_>, from_seq: u32) -> Result<(), StoreError>;
    /// Forgets journals begun before `before_ms` (left by nodes that died;
    /// their retries are long over). Returns how many events went.
    async fn journal_sweep(&self, before_ms: i64) -> Result<u64, StoreError>;

    // -- events (`events.rs`) --
    /// Sets `function`'s schedules to `rows`: a row whose id the function
    /// has already keeps its pause and next tick; the others go.
    async fn set_schedules(
        &self,
        tenant: &str,
        function: &str,
        rows: &[ScheduleRow],
    ) -> Result<(), StoreError>;
    /// The tenant's schedules (of one function, if named).
    async fn schedules(
        &self,
        tenant: &str,
        function: Option<&str>,
    ) -> Result<Vec<ScheduleRow>, StoreError>;
    /// Pauses a schedule, or resumes it from its tick `next_ms`; whether
    /// it exists.
    async fn pause_schedule(
        &self,
        key: (&str, &str, &str),
        paused: bool,
        next_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Removes a schedule; whether it existed.
    async fn remove_schedule(
        &self,
        tenant: &str,
        function: &str,
        id: &str,
    ) -> Result<bool, StoreError>;
    /// Sets `function`'s broker bindings to `rows` (a row whose id the
    /// function has already keeps its pause; the others go), within
    /// [`MAX_TRIGGERS_PER_TENANT`] counted in the same transaction.
    async fn set_triggers(
        &self,
        tenant: &str,
        function: &str,
        rows: &[TriggerRow],
    ) -> Result<(), StoreError>;
    /// Broker bindings: one tenant's (one function's, if named), or with
    /// no tenant every tenant's (what a member consumes).
    async fn triggers(
        &self,
        tenant: Option<&str>,
        function: Option<&str>,
    ) -> Result<Vec<TriggerRow>, StoreError>;
    /// Pauses or resumes a binding; whether it exists.
    async fn pause_trigger(
        &self,
        key: (&str, &str, &str),
        paused: bool,
    ) -> Result<bool, StoreError>;
    /// Removes a binding; whether it existed.
    async fn remove_trigger(&self, key: (&str, &str, &str)) -> Result<bool, StoreError>;
    /// Every tenant's schedules not paused whose next tick is at or
    /// before `now_ms`, earliest first.
    async fn due_schedules(&self, now_ms: i64, limit: u32) -> Result<Vec<ScheduleRow>, StoreError>;
    /// Fires `row`'s tick: moves its next tick from `row.next_ms` to
    /// `next_ms` and queues `firings` (if its tenant has fewer than
    /// `max_ready` waiting), in one transaction, unless another caller
    /// moved it first (or it was paused).
    async fn fire_schedule(
        &self,
        row: &ScheduleRow,
        next_ms: i64,
        firings: &[Enqueue],
        max_ready: u64,
    ) -> Result<Fired, StoreError>;
    /// Queues an invocation, if its tenant has fewer than `max_ready`
    /// waiting (counted in the same transaction: [`StoreError::QueueFull`]
    /// otherwise); false if its id is queued already.
    async fn enqueue(&self, item: &Enqueue, max_ready: u64) -> Result<bool, StoreError>;
    /// Claims up to `limit` queued invocations visible at `now_ms`, each
    /// invisible to other claimers for `lease_ms`, under the token
    /// `claim`: tenants in turns (each one's longest waiting, then each
    /// one's next; among tenants, the one served longest ago first), so
    /// one tenant's flood does not hold another's back. None of `skip`'s
    /// (tenants the claimer runs as many of as it lets one run).
    async fn claim_queued(
        &self,
        claim: &str,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
        skip: &[String],
    ) -> Result<Vec<Claimed>, StoreError>;
    /// Makes every claimed invocation visible again, if this store is this
    /// process's alone (SQLite: every claim in it was made by this node
    /// before it last stopped, which cannot settle it now); how many. A
    /// shared store (PostgreSQL) keeps its claims, which may be other
    /// members' live ones, until their leases lapse.
    async fn release_claims(&self) -> Result<u64, StoreError>;
    /// Settles a claimed invocation, forgetting its journal unless it is
    /// tried again; false if its claim had lapsed and another claimer has
    /// it.
    async fn settle_queued(&self, item: &Claimed, how: &Settle) -> Result<bool, StoreError>;
    /// `function`'s dead letters, newest first.
    async fn dead_letters(
        &self,
        tenant: &str,
        function: &str,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError>;
    /// Queues `function`'s dead letters (one, if `id`) again from their
    /// first attempt, to expire at `expires_ms`; how many.
    async fn requeue_dead(
        &self,
        key: (&str, &str, Option<&str>),
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<u64, StoreError>;
    /// Deletes `function`'s dead letters (one, if `id`); how many.
    async fn purge_dead(&self, key: (&str, &str, Option<&str>)) -> Result<u64, StoreError>;
    /// Every function's queue that holds anything.
    async fn queue_depths(&self) -> Result<Vec<QueueDepth>, StoreError>;

    // -- logs --
    async fn append_logs(&self, records: &[LogRecord]) -> Result<(), StoreError>;
    /// Bytes of log messages each function holds, `(tenant, function,
    /// bytes)`, kept by triggers as lines come and go.
    async fn log_usage(&self) -> Result<Vec<(String, String, u64)>, StoreError>;
    /// Deletes `function`'s oldest lines until it holds at most `keep`
    /// bytes of messages; how many lines went.
    async fn trim_logs(&self, tenant: &str, function: &str, keep: u64) -> Result<u64, StoreError>;
    /// Deletes every line written before `before_ms`; how many went.
    async fn expire_logs(&self, before_ms: i64) -> Result<u64, StoreError>;
    /// Gives the space deleted rows held back to the file system, where
    /// the store keeps it otherwise (SQLite; PostgreSQL's autovacuum does).
    async fn reclaim_space(&self) -> Result<(), StoreError> {
        Ok(())
    }
    async fn read_logs(
        &self,
        tenant: &str,
        function: &str,
        query: &LogQuery,
    ) -> Result<Vec<LogRecord>, StoreError>;
}

/// The index of this node's tapes: rows pointing into its own segment
/// files, so always in the node's SQLite, even in a cluster (a segment
/// number means nothing on another node). Synchronous: the recorder's
/// writer thread is its main caller.
pub trait TapeIndex: Send + Sync + 'static {
    /// Indexes written blocks' rows and new blobs in one transaction, which
    /// also forgets every row of segment `retire` (retention moving its
    /// last tapes forward: they are never indexed twice, nor lost).
    fn index_tapes(
        &self,
        blocks: &[TapeBlock],
        blobs: &[BlobEntry],
        retire: Option<u64>,
    ) -> Result<(), StoreError>;
    /// The blocks of `tenant` whose id range holds `id`.
    fn blocks_holding(&self, tenant: &str, id: &str) -> Result<Vec<TapeBlock>, StoreError>;
    /// `tenant`'s blocks, newest first.
    fn list_blocks(&self, tenant: &str, query: &BlockQuery) -> Result<Vec<TapeBlock>, StoreError>;
    /// Every block row of `segment`, oldest first.
    fn blocks_in_segment(&self, segment: u64) -> Result<Vec<TapeBlock>, StoreError>;
    /// Retention: forgets `gone` rows and marks `ok_expired` ones.
    fn expire_blocks(&self, gone: &[TapeBlock], ok_expired: &[TapeBlock])
    -> Result<(), StoreError>;
    /// Keeps `pin`'s tape past retention (see [`TapePin`]).
    fn pin_tape(&self, pin: &TapePin) -> Result<(), StoreError>;
    /// Every pinned tape.
    fn tape_pins(&self) -> Result<Vec<TapePin>, StoreError>;
    /// Lets these tapes go with their blocks again.
    fn unpin_tapes(&self, pins: &[TapePin]) -> Result<(), StoreError>;
    /// Where `segment` holds the payload with this hash (segments are
    /// self-contained: a payload is stored once per segment).
    fn find_blob(
        &self,
        tenant: &str,
        hash: &str,
        segment: u64,
    ) -> Result<Option<BlobEntry>, StoreError>;
    /// Forgets the index rows of `segment` at or past `from_offset`
    /// (0: the whole segment, which is being deleted).
    fn unindex_segment(&self, segment: u64, from_offset: u64) -> Result<(), StoreError>;
    /// The offset of the last indexed block of `segment`, if any.
    fn last_indexed_offset(&self, segment: u64) -> Result<Option<u64>, StoreError>;
}

/// The value after adding `delta` to the counter `current` (decimal text;
/// absent is 0): what `kv_increment` stores.
pub(crate) fn kv_counter_next(current: Option<&[u8]>, delta: u64) -> Result<u64, StoreError> {
    let now = match current {
        None => 0,
        Some(text) => std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                StoreError::KvNotACounter(format!(
                    "its value ({} bytes) is not a decimal number",
                    text.len()
                ))
            })?,
    };
    now.checked_add(delta).ok_or_else(|| {
        StoreError::KvNotACounter(format!("{now} + {delta} overflows a 64-bit counter"))
    })
}
