//! [`Store`] for [`SqliteStore`]: each call is the store's own synchronous
//! method, run on a blocking thread with owned copies of its arguments
//! (SQLite's calls block on the disk; an async worker must not).

use hearth_core::{Colocation, FunctionSpec, FunctionVersion};

use super::SqliteStore;
use crate::{
    Alias, AliasMove, Claimed, DeadLetter, Enqueue, Fired, FunctionMode, FunctionSummary, Grant,
    JournalKey, LogQuery, LogRecord, Principal, QueueDepth, ScheduleRow, SecretInfo, Settle, Split,
    Store, StoreError, TriggerRow,
};

impl SqliteStore {
    /// Runs `f` with this store on a blocking thread. A panic in `f` goes
    /// on in the caller, as if `f` had run there.
    pub(crate) async fn off_runtime<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SqliteStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(result) => result,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Err(StoreError::Stopped),
            },
        }
    }
}

/// A [`JournalKey`] that can go to another thread.
struct OwnedKey {
    tenant: String,
    function: String,
    invocation: String,
}

impl OwnedKey {
    fn of(key: &JournalKey<'_>) -> Self {
        OwnedKey {
            tenant: key.tenant.to_owned(),
            function: key.function.to_owned(),
            invocation: key.invocation.to_owned(),
        }
    }

    fn key(&self) -> JournalKey<'_> {
        JournalKey {
            tenant: &self.tenant,
            function: &self.function,
            invocation: &self.invocation,
        }
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    async fn create_tenant(&self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.off_runtime(move |s| s.create_tenant(&name)).await
    }
    async fn tenant_exists(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.off_runtime(move |s| s.tenant_exists(&name)).await
    }
    async fn add_token(
        &self,
        tenant: &str,
        grant: &Grant,
        token: &str,
    ) -> Result<Principal, StoreError> {
        let (tenant, grant, token) = (tenant.to_owned(), grant.clone(), token.to_owned());
        self.off_runtime(move |s| s.add_token(&tenant, &grant, &token))
            .await
    }
    async fn put_secret(
        &self,
        tenant: &str,
        name: &str,
        sealed: &[u8],
    ) -> Result<bool, StoreError> {
        let (tenant, name, sealed) = (tenant.to_owned(), name.to_owned(), sealed.to_vec());
        self.off_runtime(move |s| s.put_secret(&tenant, &name, &sealed))
            .await
    }
    async fn secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>, StoreError> {
        let tenant = tenant.to_owned();
        self.off_runtime(move |s| s.secrets(&tenant)).await
    }
    async fn sealed_secret(&self, tenant: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.off_runtime(move |s| s.sealed_secret(&tenant, &name))
            .await
    }
    async fn remove_secret(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.off_runtime(move |s| s.remove_secret(&tenant, &name))
            .await
    }
    async fn tokens(&self, tenant: &str) -> Result<Vec<Principal>, StoreError> {
        let tenant = tenant.to_owned();
        self.off_runtime(move |s| s.tokens(&tenant)).await
    }
    async fn revoke_token(&self, tenant: &str, id: &str) -> Result<Principal, StoreError> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.off_runtime(move |s| s.revoke_token(&tenant, &id))
            .await
    }
    async fn replace_token(
        &self,
        tenant: &str,
        id: &str,
        token: &str,
    ) -> Result<Principal, StoreError> {
        let (tenant, id, token) = (tenant.to_owned(), id.to_owned(), token.to_owned());
        self.off_runtime(move |s| s.replace_token(&tenant, &id, &token))
            .await
    }
    async fn tenant_colocation(&self, tenant: &str) -> Result<Option<Colocation>, StoreError> {
        let tenant = tenant.to_owned();
        self.off_runtime(move |s| s.tenant_colocation(&tenant))
            .await
    }
    async fn set_tenant_colocation(
        &self,
        tenant: &str,
        mode: Option<Colocation>,
    ) -> Result<(), StoreError> {
        let tenant = tenant.to_owned();
        self.off_runtime(move |s| s.set_tenant_colocation(&tenant, mode))
            .await
    }
    async fn authenticate(&self, token: &str) -> Result<Option<Principal>, StoreError> {
        let token = token.to_owned();
        self.off_runtime(move |s| s.authenticate(&token)).await
    }

    async fn create_version(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        spec: &FunctionSpec,
        promote: bool,
    ) -> Result<FunctionVersion, StoreError> {
        let (tenant, name, artifact, spec) = (
            tenant.to_owned(),
            name.to_owned(),
            artifact.to_owned(),
            spec.clone(),
        );
        self.off_runtime(move |s| s.create_version(&tenant, &name, &artifact, &spec, promote))
            .await
    }
    async fn get_version(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.off_runtime(move |s| s.get_version(&tenant, &name, version))
            .await
    }
    async fn alias_version(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<FunctionVersion>, StoreError> {
        let (tenant, name, alias) = (tenant.to_owned(), name.to_owned(), alias.to_owned());
        self.off_runtime(move |s| s.alias_version(&tenant, &name, &alias))
            .await
    }
    async fn aliases(&self, tenant: &str, name: &str) -> Result<Vec<Alias>, StoreError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.off_runtime(move |s| s.aliases(&tenant, &name)).await
    }
    async fn set_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        version: u32,
        split: Option<Split>,
    ) -> Result<AliasMove, StoreError> {
        let (tenant, name, alias) = (tenant.to_owned(), name.to_owned(), alias.to_owned());
        self.off_runtime(move |s| s.set_alias(&tenant, &name, &alias, version, split))
            .await
    }
    async fn alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<Option<Alias>, StoreError> {
        let (tenant, name, alias) = (tenant.to_owned(), name.to_owned(), alias.to_owned());
        self.off_runtime(move |s| s.alias(&tenant, &name, &alias))
            .await
    }
    async fn rollback_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<AliasMove, StoreError> {
        let (tenant, name, alias) = (tenant.to_owned(), name.to_owned(), alias.to_owned());
        self.off_runtime(move |s| s.rollback_alias(&tenant, &name, &alias))
            .await
    }
    async fn remove_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<bool, StoreError> {
        let (tenant, name, alias) = (tenant.to_owned(), name.to_owned(), alias.to_owned());
        self.off_runtime(move |s| s.remove_alias(&tenant, &name, &alias))
            .await
    }
    async fn alias_moves(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        limit: u32,
    ) -> Result<Vec<AliasMove>, StoreError> {
        let (tenant, name, alias) = (tenant.to_owned(), name.to_owned(), alias.to_owned());
        self.off_runtime(move |s| s.alias_moves(&tenant, &name, &alias, limit))
            .await
    }
    async fn list_functions(&self, tenant: &str) -> Result<Vec<FunctionSummary>, StoreError> {
        let tenant = tenant.to_owned();
        self.off_runtime(move |s| s.list_functions(&tenant)).await
    }
    async fn list_versions(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Vec<FunctionVersion>, StoreError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.off_runtime(move |s| s.list_versions(&tenant, &name))
            .await
    }
    async fn delete_function(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.off_runtime(move |s| s.delete_function(&tenant, &name))
            .await
    }
    async fn function_mode(&self, tenant: &str, name: &str) -> Result<FunctionMode, StoreError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.off_runtime(move |s| s.function_mode(&tenant, &name))
            .await
    }
    async fn record_bounce(
        &self,
        tenant: &str,
        name: &str,
        pin_after: u32,
    ) -> Result<FunctionMode, StoreError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.off_runtime(move |s| s.record_bounce(&tenant, &name, pin_after))
            .await
    }
    async fn referenced_artifacts(&self) -> Result<Vec<String>, StoreError> {
        self.off_runtime(|s| s.referenced_artifacts()).await
    }

    async fn kv_get(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let (tenant, function, key) = (tenant.to_owned(), function.to_owned(), key.to_owned());
        self.off_runtime(move |s| s.kv_get(&tenant, &function, &key))
            .await
    }
    async fn kv_exists(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<bool, StoreError> {
        let (tenant, function, key) = (tenant.to_owned(), function.to_owned(), key.to_owned());
        self.off_runtime(move |s| s.kv_exists(&tenant, &function, &key))
            .await
    }
    async fn kv_set(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
        value: &[u8],
        max_tenant_bytes: u64,
    ) -> Result<(), StoreError> {
        let (tenant, function) = (tenant.to_owned(), function.to_owned());
        let (key, value) = (key.to_owned(), value.to_owned());
        self.off_runtime(move |s| s.kv_set(&tenant, &function, &key, &value, max_tenant_bytes))
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
        let (tenant, function, key) = (tenant.to_owned(), function.to_owned(), key.to_owned());
        self.off_runtime(move |s| s.kv_increment(&tenant, &function, &key, delta, max_tenant_bytes))
            .await
    }
    async fn kv_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let tenant = tenant.to_owned();
        self.off_runtime(move |s| s.kv_bytes(&tenant)).await
    }
    async fn kv_delete(
        &self,
        tenant: &str,
        function: &str,
        key: &[u8],
    ) -> Result<bool, StoreError> {
        let (tenant, function, key) = (tenant.to_owned(), function.to_owned(), key.to_owned());
        self.off_runtime(move |s| s.kv_delete(&tenant, &function, &key))
            .await
    }
    async fn kv_list(
        &self,
        tenant: &str,
        function: &str,
        prefix: &[u8],
        limit: u32,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let (tenant, function) = (tenant.to_owned(), function.to_owned());
        let prefix = prefix.to_owned();
        self.off_runtime(move |s| s.kv_list(&tenant, &function, &prefix, limit))
            .await
    }

    async fn journal_append(
        &self,
        key: &JournalKey<'_>,
        seq: u32,
        event: &[u8],
    ) -> Result<(), StoreError> {
        let (key, event) = (OwnedKey::of(key), event.to_owned());
        self.off_runtime(move |s| s.journal_append(&key.key(), seq, &event))
            .await
    }
    async fn journal_read(&self, key: &JournalKey<'_>) -> Result<Vec<Vec<u8>>, StoreError> {
        let key = OwnedKey::of(key);
        self.off_runtime(move |s| s.journal_read(&key.key())).await
    }
    async fn journal_forget(&self, key: &JournalKey<'_>) -> Result<(), StoreError> {
        let key = OwnedKey::of(key);
        self.off_runtime(move |s| s.journal_forget(&key.key()))
            .await
    }
    async fn journal_cut(&self, key: &JournalKey<'_>, from_seq: u32) -> Result<(), StoreError> {
        let key = OwnedKey::of(key);
        self.off_runtime(move |s| s.journal_cut(&key.key(), from_seq))
            .await
    }
    async fn journal_sweep(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.off_runtime(move |s| s.journal_sweep(before_ms)).await
    }

    async fn set_schedules(
        &self,
        tenant: &str,
        function: &str,
        rows: &[ScheduleRow],
    ) -> Result<(), StoreError> {
        let (tenant, function, rows) = (tenant.to_owned(), function.to_owned(), rows.to_vec());
        self.off_runtime(move |s| s.set_schedules(&tenant, &function, &rows))
            .await
    }
    async fn schedules(
        &self,
        tenant: &str,
        function: Option<&str>,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let (tenant, function) = (tenant.to_owned(), function.map(str::to_owned));
        self.off_runtime(move |s| s.schedules(&tenant, function.as_deref()))
            .await
    }
    async fn pause_schedule(
        &self,
        (tenant, function, id): (&str, &str, &str),
        paused: bool,
        next_ms: i64,
    ) -> Result<bool, StoreError> {
        let key = (tenant.to_owned(), function.to_owned(), id.to_owned());
        self.off_runtime(move |s| s.pause_schedule((&key.0, &key.1, &key.2), paused, next_ms))
            .await
    }
    async fn remove_schedule(
        &self,
        tenant: &str,
        function: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        let key = (tenant.to_owned(), function.to_owned(), id.to_owned());
        self.off_runtime(move |s| s.remove_schedule(&key.0, &key.1, &key.2))
            .await
    }
    async fn set_triggers(
        &self,
        tenant: &str,
        function: &str,
        rows: &[TriggerRow],
    ) -> Result<(), StoreError> {
        let (tenant, function, rows) = (tenant.to_owned(), function.to_owned(), rows.to_vec());
        self.off_runtime(move |s| s.set_triggers(&tenant, &function, &rows))
            .await
    }
    async fn triggers(
        &self,
        tenant: Option<&str>,
        function: Option<&str>,
    ) -> Result<Vec<TriggerRow>, StoreError> {
        let (tenant, function) = (tenant.map(str::to_owned), function.map(str::to_owned));
        self.off_runtime(move |s| s.triggers(tenant.as_deref(), function.as_deref()))
            .await
    }
    async fn pause_trigger(
        &self,
        (tenant, function, id): (&str, &str, &str),
        paused: bool,
    ) -> Result<bool, StoreError> {
        let key = (tenant.to_owned(), function.to_owned(), id.to_owned());
        self.off_runtime(move |s| s.pause_trigger((&key.0, &key.1, &key.2), paused))
            .await
    }
    async fn remove_trigger(
        &self,
        (tenant, function, id): (&str, &str, &str),
    ) -> Result<bool, StoreError> {
        let key = (tenant.to_owned(), function.to_owned(), id.to_owned());
        self.off_runtime(move |s| s.remove_trigger((&key.0, &key.1, &key.2)))
            .await
    }
    async fn due_schedules(&self, now_ms: i64, limit: u32) -> Result<Vec<ScheduleRow>, StoreError> {
        self.off_runtime(move |s| s.due_schedules(now_ms, limit))
            .await
    }
    async fn fire_schedule(
        &self,
        row: &ScheduleRow,
        next_ms: i64,
        firings: &[Enqueue],
        max_ready: u64,
    ) -> Result<Fired, StoreError> {
        let (row, firings) = (row.clone(), firings.to_vec());
        self.off_runtime(move |s| s.fire_schedule(&row, next_ms, &firings, max_ready))
            .await
    }
    async fn enqueue(&self, item: &Enqueue, max_ready: u64) -> Result<bool, StoreError> {
        let item = item.clone();
        self.off_runtime(move |s| s.enqueue(&item, max_ready)).await
    }
    async fn claim_queued(
        &self,
        claim: &str,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
        skip: &[String],
    ) -> Result<Vec<Claimed>, StoreError> {
        let (claim, skip) = (claim.to_owned(), skip.to_vec());
        self.off_runtime(move |s| s.claim_queued(&claim, now_ms, lease_ms, limit, &skip))
            .await
    }
    async fn release_claims(&self) -> Result<u64, StoreError> {
        self.off_runtime(|s| s.release_claims()).await
    }
    async fn settle_queued(&self, item: &Claimed, how: &Settle) -> Result<bool, StoreError> {
        let (item, how) = (item.clone(), how.clone());
        self.off_runtime(move |s| s.settle_queued(&item, &how))
            .await
    }
    async fn dead_letters(
        &self,
        tenant: &str,
        function: &str,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let (tenant, function) = (tenant.to_owned(), function.to_owned());
        self.off_runtime(move |s| s.dead_letters(&tenant, &function, limit))
            .await
    }
    async fn requeue_dead(
        &self,
        (tenant, function, id): (&str, &str, Option<&str>),
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<u64, StoreError> {
        let key = (
            tenant.to_owned(),
            function.to_owned(),
            id.map(str::to_owned),
        );
        self.off_runtime(move |s| {
            s.requeue_dead((&key.0, &key.1, key.2.as_deref()), now_ms, expires_ms)
        })
        .await
    }
    async fn purge_dead(
        &self,
        (tenant, function, id): (&str, &str, Option<&str>),
    ) -> Result<u64, StoreError> {
        let key = (
            tenant.to_owned(),
            function.to_owned(),
            id.map(str::to_owned),
        );
        self.off_runtime(move |s| s.purge_dead((&key.0, &key.1, key.2.as_deref())))
            .await
    }
    async fn queue_depths(&self) -> Result<Vec<QueueDepth>, StoreError> {
        self.off_runtime(|s| s.queue_depths()).await
    }

    async fn append_logs(&self, records: &[LogRecord]) -> Result<(), StoreError> {
        let records = records.to_owned();
        self.off_runtime(move |s| s.append_logs(&records)).await
    }
    async fn log_usage(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        self.off_runtime(|s| s.log_usage()).await
    }
    async fn trim_logs(&self, tenant: &str, function: &str, keep: u64) -> Result<u64, StoreError> {
        let (tenant, function) = (tenant.to_owned(), function.to_owned());
        self.off_runtime(move |s| s.trim_logs(&tenant, &function, keep))
            .await
    }
    async fn expire_logs(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.off_runtime(move |s| s.expire_logs(before_ms)).await
    }
    async fn reclaim_space(&self) -> Result<(), StoreError> {
        self.off_runtime(|s| s.reclaim_space()).await
    }
    async fn read_logs(
        &self,
        tenant: &str,
        function: &str,
        query: &LogQuery,
    ) -> Result<Vec<LogRecord>, StoreError> {
        let (tenant, function, query) = (tenant.to_owned(), function.to_owned(), query.clone());
        self.off_runtime(move |s| s.read_logs(&tenant, &function, &query))
            .await
    }
}
