//! [`SplitStore`]: what a cluster member runs. The cluster's state
//! (registry, tokens, KV, logs) is shared in PostgreSQL; the tape index
//! stays in the member's own SQLite, beside the segment files it points
//! into (a segment number means nothing on another node).

use hearth_core::{Colocation, FunctionSpec, FunctionVersion};

use crate::{
    Alias, AliasMove, BlobEntry, BlockQuery, Claimed, DeadLetter, Enqueue, Fired, FunctionMode,
    FunctionSummary, Grant, JournalKey, LogQuery, LogRecord, PgStore, Principal, QueueDepth,
    ScheduleRow, SecretInfo, Settle, SqliteStore, Store, StoreError, TapeBlock, TapeIndex, TapePin,
    TriggerRow,
};

/// Shared state in PostgreSQL, the tape index in local SQLite.
pub struct SplitStore {
    shared: std::sync::Arc<PgStore>,
    local: SqliteStore,
}

impl SplitStore {
    pub fn new(shared: std::sync::Arc<PgStore>, local: SqliteStore) -> Self {
        SplitStore { shared, local }
    }

    /// Hands this node's tape index to the cluster's store as it leaves
    /// (`url` is where it was reached): the cluster then knows which of
    /// its tapes are on the machine it left. How many tapes.
    pub async fn hand_over_tapes(&self, url: &str) -> Result<u64, StoreError> {
        let blocks = self.local.off_runtime(|local| local.all_blocks()).await?;
        self.shared.hand_over_tapes(url, &blocks).await
    }
}

#[async_trait::async_trait]
impl Store for SplitStore {
    async fn create_tenant(&self, name: &str) -> Result<(), StoreError> {
        self.shared.create_tenant(name).await
    }
    async fn tenant_exists(&self, name: &str) -> Result<bool, StoreError> {
        self.shared.tenant_exists(name).await
    }
    async fn tenant_colocation(&self, tenant: &str) -> Result<Option<Colocation>, StoreError> {
        self.shared.tenant_colocation(tenant).await
    }
    async fn set_tenant_colocation(
        &self,
        tenant: &str,
        mode: Option<Colocation>,
    ) -> Result<(), StoreError> {
        self.shared.set_tenant_colocation(tenant, mode).await
    }
    async fn add_token(
        &self,
        tenant: &str,
        grant: &Grant,
        token: &str,
    ) -> Result<Principal, StoreError> {
        self.shared.add_token(tenant, grant, token).await
    }
    async fn put_secret(
        &self,
        tenant: &str,
        name: &str,
        sealed: &[u8],
    ) -> Result<bool, StoreError> {
        self.shared.put_secret(tenant, name, sealed).await
    }
    async fn secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>, StoreError> {
        self.shared.secrets(tenant).await
    }
    async fn sealed_secret(&self, tenant: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.shared.sealed_secret(tenant, name).await
    }
    async fn remove_secret(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        self.shared.remove_secret(tenant, name).await
    }
    async fn tokens(&self, tenant: &str) -> Result<Vec<Principal>, StoreError> {
        self.shared.tokens(tenant).await
    }
    async fn revoke_token(&self, tenant: &str, id: &str) -> Result<Principal, StoreError> {
        self.shared.revoke_token(tenant, id).await
    }
    async fn replace_token(
        &self,
        tenant: &str,
        id: &str,
        token: &str,
    ) -> Result<Principal, StoreError> {
        self.shared.replace_token(tenant, id, token).await
    }
    async fn authenticate(&self, token: &str) -> Result<Option<Principal>, StoreError> {
        self.shared.authenticate(token).await
    }
    async fn create_version(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        spec: &FunctionSpec,
        promote: bool,
    ) -> Result<FunctionVersion, StoreError> {
        self.shared
            .create_version(tenant, name, artifact, spec, promote)
            .await
    }
    async fn get_version(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        self.shared.get_version(tenant, name, version).await
    }
    async fn alias_version(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        self.shared.alias_version(tenant, name, alias).await
    }
    async fn aliases(&self, tenant: &str, name: &str) -> Result<Vec<Alias>, StoreError> {
        self.shared.aliases(tenant, name).await
    }
    async fn set_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        version: u32,
        split: Option<crate::Split>,
    ) -> Result<AliasMove, StoreError> {
        self.shared
            .set_alias(tenant, name, alias, version, split)
            .await
    }
    async fn alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<Alias>, StoreError> {
        self.shared.alias(tenant, name, alias).await
    }
    async fn rollback_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<AliasMove, StoreError> {
        self.shared.rollback_alias(tenant, name, alias).await
    }
    async fn remove_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<bool, StoreError> {
        self.shared.remove_alias(tenant, name, alias).await
    }
    async fn alias_moves(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        limit: u32,
    ) -> Result<Vec<AliasMove>, StoreError> {
        self.shared.alias_moves(tenant, name, alias, limit).await
    }
    async fn list_functions(&self, tenant: &str) -> Result<Vec<FunctionSummary>, StoreError> {
        self.shared.list_functions(tenant).await
    }
    async fn list_versions(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Vec<FunctionVersion>, StoreError> {
        self.shared.list_versions(tenant, name).await
    }
    async fn delete_function(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        let existed = self.shared.delete_function(tenant, name).await?;
        // This member's tapes of it. Other members keep their index rows
        // of it until retention expires them (docs/cluster.md lists this).
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.local
            .off_runtime(move |local| local.forget_tapes(&tenant, &name))
            .await?;
        Ok(existed)
    }
    async fn function_mode(&self, tenant: &str, name: &str) -> Result<FunctionMode, StoreError> {
        self.shared.function_mode(tenant, name).await
    }
    async fn record_bounce(
        &self,
        tenant: &str,
        name: &str,
        pin_after: u32,
    ) -> Result<FunctionMode, StoreError> {
        self.shared.record_bounce(tenant, name, pin_after).await
    }
    async fn referenced_artifacts(&self) -> Result<Vec<String>, StoreError> {
        self.shared.referenced_artifacts().await
    }
    async fn kv_get(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.shared.kv_get(tenant, function, key).await
    }
    async fn kv_exists(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<bool, StoreError> {
        self.shared.kv_exists(tenant, function, key).await
    }
    async fn kv_set(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        value: &[u8],
        max_tenant_bytes: u64,
    ) -> Result<(), StoreError> {
        self.shared
            .kv_set(tenant, function, key, value, max_tenant_bytes)
            .await
    }
    async fn kv_increment(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        delta: u64,
        max_tenant_bytes: u64,
    ) -> Result<u64, StoreError> {
        self.shared
            .kv_increment(tenant, function, key, delta, max_tenant_bytes)
            .await
    }
    async fn kv_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        self.shared.kv_bytes(tenant).await
    }
    async fn kv_delete(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<bool, StoreError> {
        self.shared.kv_delete(tenant, function, key).await
    }
    async fn kv_list(
        &self,
        tenant: &str,
        function: &str,
        prefix: &[u8],
        limit: u32,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        self.shared.kv_list(tenant, function, prefix, limit).await
    }
    async fn journal_append(
        &self,
        key: &JournalKey<'_>,
        seq: u32,
        event: &[u8],
    ) -> Result<(), StoreError> {
        self.shared.journal_append(key, seq, event).await
    }
    async fn journal_read(&self, key: &JournalKey<'_>) -> Result<Vec<Vec<u8>>, StoreError> {
        self.shared.journal_read(key).await
    }
    async fn journal_forget(&self, key: &JournalKey<'_>) -> Result<(), StoreError> {
        self.shared.journal_forget(key).await
    }
    async fn journal_cut(&self, key: &JournalKey<'_>, from_seq: u32) -> Result<(), StoreError> {
        self.shared.journal_cut(key, from_seq).await
    }
    async fn journal_sweep(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.shared.journal_sweep(before_ms).await
    }
    async fn set_schedules(
        &self,
        tenant: &str,
        function: &str,
        rows: &[ScheduleRow],
    ) -> Result<(), StoreError> {
        self.shared.set_schedules(tenant, function, rows).await
    }
    async fn schedules(
        &self,
        tenant: &str,
        function: Option<&str>,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        self.shared.schedules(tenant, function).await
    }
    async fn pause_schedule(
        &self,
        key: (&str, &str, &str),
        paused: bool,
        next_ms: i64,
    ) -> Result<bool, StoreError> {
        self.shared.pause_schedule(key, paused, next_ms).await
    }
    async fn remove_schedule(
        &self,
        tenant: &str,
        function: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        self.shared.remove_schedule(tenant, function, id).await
    }
    async fn set_triggers(
        &self,
        tenant: &str,
        function: &str,
        rows: &[TriggerRow],
    ) -> Result<(), StoreError> {
        self.shared.set_triggers(tenant, function, rows).await
    }
    async fn triggers(
        &self,
        tenant: Option<&str>,
        function: Option<&str>,
    ) -> Result<Vec<TriggerRow>, StoreError> {
        self.shared.triggers(tenant, function).await
    }
    async fn pause_trigger(
        &self,
        key: (&str, &str, &str),
        paused: bool,
    ) -> Result<bool, StoreError> {
        self.shared.pause_trigger(key, paused).await
    }
    async fn remove_trigger(&self, key: (&str, &str, &str)) -> Result<bool, StoreError> {
        self.shared.remove_trigger(key).await
    }
    async fn due_schedules(&self, now_ms: i64, limit: u32) -> Result<Vec<ScheduleRow>, StoreError> {
        self.shared.due_schedules(now_ms, limit).await
    }
    async fn fire_schedule(
        &self,
        row: &ScheduleRow,
        next_ms: i64,
        firings: &[Enqueue],
        max_ready: u64,
    ) -> Result<Fired, StoreError> {
        self.shared
            .fire_schedule(row, next_ms, firings, max_ready)
            .await
    }
    async fn enqueue(&self, item: &Enqueue, max_ready: u64) -> Result<bool, StoreError> {
        self.shared.enqueue(item, max_ready).await
    }
    async fn claim_queued(
        &self,
        claim: &str,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
        skip: &[String],
    ) -> Result<Vec<Claimed>, StoreError> {
        self.shared
            .claim_queued(claim, now_ms, lease_ms, limit, skip)
            .await
    }
    async fn release_claims(&self) -> Result<u64, StoreError> {
        // The cluster's queue: other members' claims may be live.
        Ok(0)
    }
    async fn settle_queued(&self, item: &Claimed, how: &Settle) -> Result<bool, StoreError> {
        self.shared.settle_queued(item, how).await
    }
    async fn dead_letters(
        &self,
        tenant: &str,
        function: &str,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.shared.dead_letters(tenant, function, limit).await
    }
    async fn requeue_dead(
        &self,
        key: (&str, &str, Option<&str>),
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<u64, StoreError> {
        self.shared.requeue_dead(key, now_ms, expires_ms).await
    }
    async fn purge_dead(&self, key: (&str, &str, Option<&str>)) -> Result<u64, StoreError> {
        self.shared.purge_dead(key).await
    }
    async fn queue_depths(&self) -> Result<Vec<QueueDepth>, StoreError> {
        self.shared.queue_depths().await
    }

    async fn append_logs(&self, records: &[LogRecord]) -> Result<(), StoreError> {
        self.shared.append_logs(records).await
    }
    async fn log_usage(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        self.shared.log_usage().await
    }
    async fn trim_logs(&self, tenant: &str, function: &str, keep: u64) -> Result<u64, StoreError> {
        self.shared.trim_logs(tenant, function, keep).await
    }
    async fn expire_logs(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.shared.expire_logs(before_ms).await
    }
    async fn read_logs(
        &self,
        tenant: &str,
        function: &str,
        query: &LogQuery,
    ) -> Result<Vec<LogRecord>, StoreError> {
        self.shared.read_logs(tenant, function, query).await
    }
}

/// The tape index: this member's own.
impl TapeIndex for SplitStore {
    fn index_tapes(
        &self,
        blocks: &[TapeBlock],
        blobs: &[BlobEntry],
        retire: Option<u64>,
    ) -> Result<(), StoreError> {
        self.local.index_tapes(blocks, blobs, retire)
    }
    fn blocks_holding(&self, tenant: &str, id: &str) -> Result<Vec<TapeBlock>, StoreError> {
        self.local.blocks_holding(tenant, id)
    }
    fn list_blocks(&self, tenant: &str, query: &BlockQuery) -> Result<Vec<TapeBlock>, StoreError> {
        self.local.list_blocks(tenant, query)
    }
    fn blocks_in_segment(&self, segment: u64) -> Result<Vec<TapeBlock>, StoreError> {
        self.local.blocks_in_segment(segment)
    }
    fn expire_blocks(
        &self,
        gone: &[TapeBlock],
        ok_expired: &[TapeBlock],
    ) -> Result<(), StoreError> {
        self.local.expire_blocks(gone, ok_expired)
    }
    fn pin_tape(&self, pin: &TapePin) -> Result<(), StoreError> {
        self.local.pin_tape(pin)
    }
    fn tape_pins(&self) -> Result<Vec<TapePin>, StoreError> {
        self.local.tape_pins()
    }
    fn unpin_tapes(&self, pins: &[TapePin]) -> Result<(), StoreError> {
        self.local.unpin_tapes(pins)
    }
    fn find_blob(
        &self,
        tenant: &str,
        hash: &str,
        segment: u64,
    ) -> Result<Option<BlobEntry>, StoreError> {
        self.local.find_blob(tenant, hash, segment)
    }
    fn unindex_segment(&self, segment: u64, from_offset: u64) -> Result<(), StoreError> {
        self.local.unindex_segment(segment, from_offset)
    }
    fn last_indexed_offset(&self, segment: u64) -> Result<Option<u64>, StoreError> {
        self.local.last_indexed_offset(segment)
    }
}
