//! Behaviour every [`Store`] must have, run against each backend: SQLite
//! here, PostgreSQL (through `SplitStore`) in `postgres.rs`'s tests.

use std::future::Future;
use std::pin::Pin;

use hearth_core::{Colocation, FunctionSpec, Runtime};

use crate::{
    Alias, Claimed, Enqueue, Fired, FunctionMode, Grant, JournalKey, LIVE, LogQuery, LogRecord,
    LogStream, ScheduleRow, Scope, Settle, Store, StoreError,
};

/// One scenario: it wants a fresh, empty store.
type Scenario = for<'a> fn(&'a dyn Store) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Each scenario with its name.
macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        pub(crate) const SCENARIOS: &[(&str, Scenario)] =
            &[$((stringify!($name), |s| Box::pin($name(s)))),*];
    };
}

scenarios![
    aliases_move_with_history_and_roll_back_one_move_at_a_time,
    versions_resolve_newest_or_pinned,
    delete_removes_function_and_numbering_continues,
    tokens_authenticate_to_their_tenant_only,
    tokens_are_listed_revoked_and_rotated_within_their_tenant,
    secrets_are_kept_per_tenant_replaced_removed_and_bounded,
    tenant_colocation_overrides_are_set_cleared_and_refused_for_unknown_tenants,
    bounces_count_up_pin_at_the_limit_and_reset_on_deploy,
    kv_is_scoped_and_lists_by_prefix,
    kv_quota_counts_all_of_a_tenants_functions_and_refuses_whole,
    kv_counters_increment_in_place_and_refuse_what_is_not_a_number,
    logs_filter_by_invocation_and_return_oldest_first,
    logs_are_counted_per_function_trimmed_oldest_first_and_expired,
    journals_keep_order_per_invocation_and_are_forgotten_or_swept,
    a_schedules_tick_is_fired_once_and_a_redeploy_keeps_its_state,
    queued_invocations_are_claimed_once_until_their_lease_lapses_and_settle_once,
    claims_take_tenants_in_turns,
    a_functions_dead_letters_are_bounded_oldest_first,
    broker_bindings_keep_their_pause_across_deploys_and_are_bounded,
];

pub(crate) async fn versions_resolve_newest_or_pinned(s: &dyn Store) {
    s.create_tenant("acme").await.unwrap();
    let spec = FunctionSpec::new(Runtime::Wasm);
    assert_eq!(
        s.create_version("acme", "hello", "aa", &spec, true)
            .await
            .unwrap()
            .version,
        1
    );
    assert_eq!(
        s.create_version("acme", "hello", "bb", &spec, true)
            .await
            .unwrap()
            .version,
        2
    );
    let latest = s.get_version("acme", "hello", None).await.unwrap().unwrap();
    assert_eq!((latest.version, latest.artifact.as_str()), (2, "bb"));
    assert_eq!(latest.spec, spec);
    let first = s
        .get_version("acme", "hello", Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.artifact, "aa");
    assert!(
        s.get_version("acme", "hello", Some(3))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(s.list_versions("acme", "hello").await.unwrap().len(), 2);
    let listed = s.list_functions("acme").await.unwrap();
    assert_eq!((listed.len(), listed[0].versions), (1, 2));
    assert!(
        s.get_version("other", "hello", None)
            .await
            .unwrap()
            .is_none()
    );
    let mut refs = s.referenced_artifacts().await.unwrap();
    refs.sort();
    assert_eq!(refs, ["aa", "bb"]);
}

async fn delete_removes_function_and_numbering_continues(s: &dyn Store) {
    let spec = FunctionSpec::new(Runtime::Wasm);
    s.create_version("t", "f", "aa", &spec, true).await.unwrap();
    s.create_version("t", "f", "bb", &spec, true).await.unwrap();
    s.kv_set("t", "f", b"k", b"v", u64::MAX).await.unwrap();
    assert!(s.delete_function("t", "f").await.unwrap());
    assert!(!s.delete_function("t", "f").await.unwrap());
    assert!(s.get_version("t", "f", None).await.unwrap().is_none());
    assert!(s.get_version("t", "f", Some(2)).await.unwrap().is_none());
    assert!(s.list_functions("t").await.unwrap().is_empty());
    assert!(s.list_versions("t", "f").await.unwrap().is_empty());
    assert!(s.referenced_artifacts().await.unwrap().is_empty());
    assert_eq!(s.kv_get("t", "f", b"k").await.unwrap(), None);
    assert_eq!(
        s.create_version("t", "f", "cc", &spec, true)
            .await
            .unwrap()
            .version,
        3
    );
}

async fn tokens_authenticate_to_their_tenant_only(s: &dyn Store) {
    let deploy = Grant::of(Scope::Deploy);
    let admin = Grant::of(Scope::Admin);
    s.create_tenant("acme").await.unwrap();
    assert!(matches!(
        s.create_tenant("acme").await,
        Err(StoreError::TenantExists(_))
    ));
    assert!(matches!(
        s.create_token("ghost", &deploy).await,
        Err(StoreError::NoSuchTenant(_))
    ));
    let (token, made) = s.create_token("acme", &deploy).await.unwrap();
    let p = s.authenticate(&token).await.unwrap().unwrap();
    assert_eq!(p, made);
    assert_eq!((p.tenant.as_str(), p.scope()), ("acme", Scope::Deploy));
    assert_eq!(p.id, crate::sha256_hex(token.as_bytes())[..16]);
    assert!(s.authenticate("hth_wrong").await.unwrap().is_none());

    // A token the operator chose: added once, again as a no-op, never to
    // a second tenant or scope.
    s.create_tenant("zeta").await.unwrap();
    s.add_token("acme", &admin, "chosen-by-operator")
        .await
        .unwrap();
    s.add_token("acme", &admin, "chosen-by-operator")
        .await
        .unwrap();
    let p = s.authenticate("chosen-by-operator").await.unwrap().unwrap();
    assert_eq!((p.tenant.as_str(), p.scope()), ("acme", Scope::Admin));
    assert!(matches!(
        s.add_token("zeta", &admin, "chosen-by-operator").await,
        Err(StoreError::TokenTaken)
    ));
    assert!(matches!(
        s.add_token("acme", &deploy, "chosen-by-operator").await,
        Err(StoreError::TokenTaken)
    ));
    assert!(matches!(
        s.add_token("ghost", &admin, "another").await,
        Err(StoreError::NoSuchTenant(_))
    ));
}

async fn tokens_are_listed_revoked_and_rotated_within_their_tenant(s: &dyn Store) {
    s.create_tenant("acme").await.unwrap();
    s.create_tenant("zeta").await.unwrap();
    let ci = Grant {
        function: Some("resize".into()),
        expires_ms: Some(4_000_000_000_000),
        name: Some("ci".into()),
        ..Grant::of(Scope::Invoke)
    };
    let (reader, read) = s
        .create_token("acme", &Grant::of(Scope::Read))
        .await
        .unwrap();
    let (invoker, invoke) = s.create_token("acme", &ci).await.unwrap();
    s.create_token("zeta", &Grant::of(Scope::Deploy))
        .await
        .unwrap();
    // Oldest first; two made in one millisecond in either order.
    let mut listed = s.tokens("acme").await.unwrap();
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    let mut made = vec![read.clone(), invoke.clone()];
    made.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(listed, made);
    assert_eq!(invoke.grant, ci, "the grant is kept whole");

    // Another tenant's id is no token of this tenant's.
    assert!(matches!(
        s.revoke_token("zeta", &read.id).await,
        Err(StoreError::NoSuchToken { .. })
    ));
    assert!(matches!(
        s.revoke_token("acme", "not-an-id").await,
        Err(StoreError::NoSuchToken { .. })
    ));
    assert_eq!(s.revoke_token("acme", &read.id).await.unwrap(), read);
    assert!(s.authenticate(&reader).await.unwrap().is_none());
    assert!(matches!(
        s.revoke_token("acme", &read.id).await,
        Err(StoreError::NoSuchToken { .. })
    ));

    // Rotation: the old stops as the new starts, with the same grant.
    let (rotated, new) = s.rotate_token("acme", &invoke.id).await.unwrap();
    assert!(s.authenticate(&invoker).await.unwrap().is_none());
    let p = s.authenticate(&rotated).await.unwrap().unwrap();
    assert_eq!((p.grant, &p.id), (ci, &new.id));
    assert_ne!(new.id, invoke.id);
    assert_eq!(s.tokens("acme").await.unwrap(), vec![new]);

    // A tenant's tokens are bounded.
    for _ in 1..crate::MAX_TOKENS_PER_TENANT {
        s.create_token("acme", &Grant::of(Scope::Read))
            .await
            .unwrap();
    }
    assert!(matches!(
        s.create_token("acme", &Grant::of(Scope::Read)).await,
        Err(StoreError::TooManyTokens { .. })
    ));
    let bad = Grant {
        name: Some("two\nlines".into()),
        ..Grant::of(Scope::Read)
    };
    assert!(matches!(
        s.create_token("zeta", &bad).await,
        Err(StoreError::BadToken(_))
    ));
}

async fn secrets_are_kept_per_tenant_replaced_removed_and_bounded(s: &dyn Store) {
    s.create_tenant("acme").await.unwrap();
    s.create_tenant("zeta").await.unwrap();
    assert!(
        s.put_secret("acme", "DB", b"sealed-1").await.unwrap(),
        "new"
    );
    assert!(
        !s.put_secret("acme", "DB", b"sealed-2").await.unwrap(),
        "replaced"
    );
    assert_eq!(
        s.sealed_secret("acme", "DB").await.unwrap().as_deref(),
        Some(&b"sealed-2"[..])
    );
    assert_eq!(
        s.sealed_secret("zeta", "DB").await.unwrap(),
        None,
        "per tenant"
    );
    let listed = s.secrets("acme").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "DB");
    assert!(listed[0].updated_ms >= listed[0].created_ms);
    assert!(s.secrets("zeta").await.unwrap().is_empty());
    assert!(matches!(
        s.put_secret("ghost", "DB", b"x").await,
        Err(StoreError::NoSuchTenant(_))
    ));
    assert!(!s.remove_secret("zeta", "DB").await.unwrap());
    assert!(s.remove_secret("acme", "DB").await.unwrap());
    assert_eq!(s.sealed_secret("acme", "DB").await.unwrap(), None);

    for i in 0..crate::MAX_SECRETS_PER_TENANT {
        s.put_secret("acme", &format!("S{i}"), b"x").await.unwrap();
    }
    assert!(matches!(
        s.put_secret("acme", "ONE_MORE", b"x").await,
        Err(StoreError::TooManySecrets { .. })
    ));
    assert!(
        !s.put_secret("acme", "S0", b"y").await.unwrap(),
        "a replacement still fits"
    );
    let huge = vec![0u8; crate::MAX_SEALED_SECRET_BYTES + 1];
    assert!(s.put_secret("zeta", "BIG", &huge).await.is_err());
}

async fn tenant_colocation_overrides_are_set_cleared_and_refused_for_unknown_tenants(
    s: &dyn Store,
) {
    s.create_tenant("acme").await.unwrap();
    s.create_tenant("zeta").await.unwrap();
    assert_eq!(
        s.tenant_colocation("acme").await.unwrap(),
        None,
        "no override yet"
    );
    s.set_tenant_colocation("acme", Some(Colocation::Function))
        .await
        .unwrap();
    s.set_tenant_colocation("acme", Some(Colocation::None))
        .await
        .unwrap();
    assert_eq!(
        s.tenant_colocation("acme").await.unwrap(),
        Some(Colocation::None),
        "the second write replaces the first"
    );
    assert_eq!(
        s.tenant_colocation("zeta").await.unwrap(),
        None,
        "per tenant"
    );
    s.set_tenant_colocation("acme", None).await.unwrap();
    assert_eq!(s.tenant_colocation("acme").await.unwrap(), None, "cleared");
    assert!(matches!(
        s.set_tenant_colocation("ghost", Some(Colocation::Full)).await,
        Err(StoreError::NoSuchTenant(t)) if t == "ghost"
    ));
    assert_eq!(s.tenant_colocation("ghost").await.unwrap(), None);
}

async fn bounces_count_up_pin_at_the_limit_and_reset_on_deploy(s: &dyn Store) {
    s.create_tenant("t").await.unwrap();
    let spec = FunctionSpec::new(Runtime::Js);
    s.create_version("t", "f", "a", &spec, true).await.unwrap();
    assert_eq!(
        s.function_mode("t", "f").await.unwrap(),
        FunctionMode::default()
    );
    assert!(!s.record_bounce("t", "f", 2).await.unwrap().pinned);
    let m = s.record_bounce("t", "f", 2).await.unwrap();
    assert_eq!((m.bounces, m.pinned), (2, true));
    assert_eq!(s.list_functions("t").await.unwrap()[0].mode, m);
    s.create_version("t", "f", "b", &spec, true).await.unwrap();
    assert_eq!(
        s.function_mode("t", "f").await.unwrap(),
        FunctionMode::default()
    );
}

async fn kv_is_scoped_and_lists_by_prefix(s: &dyn Store) {
    s.kv_set("t", "f", b"user:1", b"a", u64::MAX).await.unwrap();
    s.kv_set("t", "f", b"user:2", b"b", u64::MAX).await.unwrap();
    s.kv_set("t", "f", b"zzz", b"c", u64::MAX).await.unwrap();
    s.kv_set("t", "g", b"user:3", b"d", u64::MAX).await.unwrap();
    s.kv_set("u", "f", b"user:4", b"e", u64::MAX).await.unwrap();
    assert_eq!(
        s.kv_list("t", "f", b"user:", 100).await.unwrap(),
        vec![b"user:1".to_vec(), b"user:2".to_vec()]
    );
    assert_eq!(s.kv_list("t", "f", b"", 2).await.unwrap().len(), 2);
    assert_eq!(s.kv_get("u", "f", b"user:1").await.unwrap(), None);
    s.kv_set("t", "f", b"user:1", b"z", u64::MAX).await.unwrap();
    assert_eq!(s.kv_get("t", "f", b"user:1").await.unwrap().unwrap(), b"z");
    assert!(s.kv_exists("t", "f", b"user:1").await.unwrap());
    assert!(
        !s.kv_exists("u", "f", b"user:1").await.unwrap(),
        "another tenant's"
    );
    assert!(
        !s.kv_exists("t", "g", b"user:1").await.unwrap(),
        "another function's"
    );
    assert!(s.kv_delete("t", "f", b"user:1").await.unwrap());
    assert!(!s.kv_delete("t", "f", b"user:1").await.unwrap());
    assert!(!s.kv_exists("t", "f", b"user:1").await.unwrap(), "deleted");
}

async fn kv_quota_counts_all_of_a_tenants_functions_and_refuses_whole(s: &dyn Store) {
    // 1 + 4 bytes each: key and value count.
    s.kv_set("q", "f", b"a", b"1234", 12).await.unwrap();
    s.kv_set("q", "g", b"b", b"1234", 12).await.unwrap();
    assert_eq!(s.kv_bytes("q").await.unwrap(), 10);
    // Another function of the same tenant would pass 12: refused, unchanged.
    let err = s.kv_set("q", "h", b"c", b"1234", 12).await.unwrap_err();
    assert!(
        matches!(err, StoreError::KvQuota { max_bytes: 12, .. }),
        "{err}"
    );
    assert_eq!(s.kv_get("q", "h", b"c").await.unwrap(), None);
    assert_eq!(s.kv_bytes("q").await.unwrap(), 10);
    // Overwriting counts the difference; deleting gives room back.
    s.kv_set("q", "f", b"a", b"123456", 12).await.unwrap();
    assert_eq!(s.kv_bytes("q").await.unwrap(), 12);
    assert!(s.kv_delete("q", "g", b"b").await.unwrap());
    assert_eq!(s.kv_bytes("q").await.unwrap(), 7);
    s.kv_set("q", "h", b"c", b"1234", 12).await.unwrap();
    // Other tenants have their own.
    assert_eq!(s.kv_bytes("other").await.unwrap(), 0);
    s.kv_set("other", "f", b"a", b"1234", 12).await.unwrap();
}

async fn kv_counters_increment_in_place_and_refuse_what_is_not_a_number(s: &dyn Store) {
    assert_eq!(
        s.kv_increment("c", "f", b"n", 5, u64::MAX).await.unwrap(),
        5
    );
    assert_eq!(
        s.kv_increment("c", "f", b"n", 2, u64::MAX).await.unwrap(),
        7
    );
    assert_eq!(s.kv_get("c", "f", b"n").await.unwrap().unwrap(), b"7");
    // Scoped like every key.
    assert_eq!(
        s.kv_increment("c", "g", b"n", 1, u64::MAX).await.unwrap(),
        1
    );
    s.kv_set("c", "f", b"word", b"seven", u64::MAX)
        .await
        .unwrap();
    let err = s
        .kv_increment("c", "f", b"word", 1, u64::MAX)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::KvNotACounter(_)), "{err}");
    assert_eq!(
        s.kv_get("c", "f", b"word").await.unwrap().unwrap(),
        b"seven"
    );
    s.kv_set("c", "f", b"max", u64::MAX.to_string().as_bytes(), u64::MAX)
        .await
        .unwrap();
    let err = s
        .kv_increment("c", "f", b"max", 1, u64::MAX)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::KvNotACounter(_)), "{err}");
    // The quota holds: a counter that would pass it is refused, unchanged.
    let used = s.kv_bytes("c").await.unwrap();
    let err = s.kv_increment("c", "f", b"new", 1, used).await.unwrap_err();
    assert!(matches!(err, StoreError::KvQuota { .. }), "{err}");
    assert_eq!(s.kv_get("c", "f", b"new").await.unwrap(), None);
}

async fn logs_filter_by_invocation_and_return_oldest_first(s: &dyn Store) {
    let rec = |inv: &str, msg: &str| LogRecord {
        id: 0,
        tenant: "t".into(),
        function: "f".into(),
        version: 1,
        invocation_id: inv.into(),
        ts_ms: 1,
        stream: LogStream::Stderr,
        level: String::new(),
        message: msg.into(),
        // Invocation a was traced, b not.
        trace_id: (inv == "a").then(|| "4bf92f3577b34da6a3ce929d0e0e4736".into()),
    };
    s.append_logs(&[rec("a", "one"), rec("b", "two"), rec("a", "three")])
        .await
        .unwrap();
    let all = s.read_logs("t", "f", &LogQuery::default()).await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.message.as_str()).collect::<Vec<_>>(),
        ["one", "two", "three"]
    );
    assert_eq!(
        all.iter()
            .map(|r| r.trace_id.as_deref())
            .collect::<Vec<_>>(),
        [
            Some("4bf92f3577b34da6a3ce929d0e0e4736"),
            None,
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        ]
    );
    let q = LogQuery {
        invocation_id: Some("a".into()),
        limit: 1,
        after: None,
    };
    let a = s.read_logs("t", "f", &q).await.unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].message, "three");
    // A follower: lines after the one it saw, oldest first, a page at most.
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "{all:?}");
    let after = |id, limit| LogQuery {
        invocation_id: None,
        limit,
        after: Some(id),
    };
    let next = s.read_logs("t", "f", &after(all[0].id, 1)).await.unwrap();
    assert_eq!(
        next.iter().map(|r| r.message.as_str()).collect::<Vec<_>>(),
        ["two"]
    );
    let rest = s.read_logs("t", "f", &after(all[0].id, 10)).await.unwrap();
    assert_eq!(
        rest.iter().map(|r| r.message.as_str()).collect::<Vec<_>>(),
        ["two", "three"]
    );
    assert!(
        s.read_logs("t", "f", &after(all[2].id, 10))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.read_logs("u", "f", &LogQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
}

async fn logs_are_counted_per_function_trimmed_oldest_first_and_expired(s: &dyn Store) {
    let rec = |f: &str, ts_ms: i64, msg: &str| LogRecord {
        id: 0,
        tenant: "t".into(),
        function: f.into(),
        version: 1,
        invocation_id: "i".into(),
        ts_ms,
        stream: LogStream::Stderr,
        level: String::new(),
        message: msg.into(),
        trace_id: None,
    };
    // Ten lines of 10 bytes for f (ts 1..=10), one of 4 (two of them
    // 2-byte characters) for g.
    let lines: Vec<_> = (1..=10)
        .map(|i| rec("f", i, &format!("line {i:05}")))
        .collect();
    s.append_logs(&lines).await.unwrap();
    s.append_logs(&[rec("g", 100, "éé")]).await.unwrap();
    let mut usage = s.log_usage().await.unwrap();
    usage.sort();
    assert_eq!(
        usage,
        [("t".into(), "f".into(), 100), ("t".into(), "g".into(), 4)],
        "bytes, not characters"
    );
    // Keeping 35 bytes keeps the newest three whole lines.
    assert_eq!(s.trim_logs("t", "f", 35).await.unwrap(), 7);
    let left = s.read_logs("t", "f", &LogQuery::default()).await.unwrap();
    assert_eq!(
        left.iter().map(|r| r.message.as_str()).collect::<Vec<_>>(),
        ["line 00008", "line 00009", "line 00010"]
    );
    assert_eq!(
        s.trim_logs("t", "f", 35).await.unwrap(),
        0,
        "already within"
    );
    let usage = s.log_usage().await.unwrap();
    assert!(usage.contains(&("t".into(), "f".into(), 30)), "{usage:?}");
    // Older than ts 10: two more of f's go; g's stays.
    assert_eq!(s.expire_logs(10).await.unwrap(), 2);
    assert_eq!(
        s.read_logs("t", "g", &LogQuery::default())
            .await
            .unwrap()
            .len(),
        1
    );
    s.reclaim_space().await.unwrap();
    // A removed function's logs and their count go with it.
    s.create_version("t", "g", "aa", &FunctionSpec::new(Runtime::Wasm), true)
        .await
        .unwrap();
    assert!(s.delete_function("t", "g").await.unwrap());
    let usage = s.log_usage().await.unwrap();
    assert_eq!(usage, [("t".into(), "f".into(), 10)]);
}

async fn journals_keep_order_per_invocation_and_are_forgotten_or_swept(s: &dyn Store) {
    let key = |f, i| JournalKey {
        tenant: "t",
        function: f,
        invocation: i,
    };
    let (a, b, other_fn) = (key("f", "a"), key("f", "b"), key("g", "a"));
    s.journal_append(&a, 1, b"second").await.unwrap();
    s.journal_append(&a, 0, b"first").await.unwrap();
    s.journal_append(&a, 0, b"again").await.unwrap();
    s.journal_append(&b, 0, b"b's").await.unwrap();
    assert_eq!(
        s.journal_read(&a).await.unwrap(),
        vec![b"first".to_vec(), b"second".to_vec()],
        "in seq order; a repeated seq keeps the first"
    );
    assert!(
        s.journal_read(&other_fn).await.unwrap().is_empty(),
        "scoped to the function"
    );
    s.journal_forget(&a).await.unwrap();
    assert!(s.journal_read(&a).await.unwrap().is_empty());
    assert_eq!(s.journal_read(&b).await.unwrap().len(), 1);
    assert_eq!(
        s.journal_sweep(hearth_core::unix_time_ms() - 60_000)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        s.journal_sweep(hearth_core::unix_time_ms() + 1)
            .await
            .unwrap(),
        1
    );
    assert!(s.journal_read(&b).await.unwrap().is_empty());
}

async fn aliases_move_with_history_and_roll_back_one_move_at_a_time(s: &dyn Store) {
    s.create_tenant("t").await.unwrap();
    let spec = FunctionSpec::new(Runtime::Wasm);
    s.create_version("t", "f", "aa", &spec, true).await.unwrap();
    s.create_version("t", "f", "bb", &spec, true).await.unwrap();
    let v3 = s
        .create_version("t", "f", "cc", &spec, false)
        .await
        .unwrap();
    assert_eq!(v3.version, 3);
    let live = async || {
        s.get_version("t", "f", None)
            .await
            .unwrap()
            .unwrap()
            .version
    };
    assert_eq!(
        live().await,
        2,
        "a version deployed without promotion is not live"
    );
    let listed = &s.list_functions("t").await.unwrap()[0];
    assert_eq!((listed.latest.version, listed.live), (3, Some(2)));
    assert_eq!(
        s.aliases("t", "f").await.unwrap(),
        vec![Alias {
            alias: LIVE.into(),
            version: 2,
            split: None,
        }]
    );

    let promoted = s.set_alias("t", "f", LIVE, 3, None).await.unwrap();
    assert_eq!(
        (promoted.version, promoted.previous, promoted.rollback),
        (3, Some(2), false)
    );
    s.set_alias("t", "f", "canary", 1, None).await.unwrap();
    let canary = s.alias_version("t", "f", "canary").await.unwrap().unwrap();
    assert_eq!((canary.version, canary.artifact.as_str()), (1, "aa"));
    assert_eq!(live().await, 3, "another alias leaves live where it is");

    // A split sends a share of live's calls to a second version; a
    // rollback gives back the alias's version and split from before.
    let split = crate::Split {
        version: 1,
        percent: 20,
    };
    let moved = s.set_alias("t", "f", LIVE, 3, Some(split)).await.unwrap();
    assert_eq!((moved.split, moved.previous_split), (Some(split), None));
    assert_eq!(
        s.alias("t", "f", LIVE).await.unwrap().unwrap().split,
        Some(split)
    );
    assert_eq!(
        s.list_functions("t").await.unwrap()[0].live_split,
        Some(split)
    );
    let back = s.rollback_alias("t", "f", LIVE).await.unwrap();
    assert_eq!((back.version, back.split), (3, None));
    assert_eq!(s.alias("t", "f", LIVE).await.unwrap().unwrap().split, None);
    for (bad, why) in [
        (
            crate::Split {
                version: 3,
                percent: 20,
            },
            "its own version",
        ),
        (
            crate::Split {
                version: 1,
                percent: 0,
            },
            "0%",
        ),
        (
            crate::Split {
                version: 1,
                percent: 100,
            },
            "100%",
        ),
    ] {
        assert!(
            matches!(
                s.set_alias("t", "f", LIVE, 3, Some(bad)).await,
                Err(StoreError::BadSplit(_))
            ),
            "{why}"
        );
    }
    assert!(matches!(
        s.set_alias(
            "t",
            "f",
            LIVE,
            3,
            Some(crate::Split {
                version: 9,
                percent: 5
            })
        )
        .await,
        Err(StoreError::NoSuchVersion { version: 9, .. })
    ));

    // Each rollback undoes one move: 3 → 2 → 1, then nothing is before.
    let back = s.rollback_alias("t", "f", LIVE).await.unwrap();
    assert_eq!(
        (back.version, back.previous, back.rollback),
        (2, Some(3), true)
    );
    assert_eq!(live().await, 2);
    assert_eq!(s.rollback_alias("t", "f", LIVE).await.unwrap().version, 1);
    assert!(matches!(
        s.rollback_alias("t", "f", LIVE).await,
        Err(StoreError::NothingToRollBack { .. })
    ));
    assert_eq!(live().await, 1, "a refused rollback moves nothing");
    // A promotion after rollbacks is a new move, which a rollback undoes.
    s.set_alias("t", "f", LIVE, 3, None).await.unwrap();
    assert_eq!(s.rollback_alias("t", "f", LIVE).await.unwrap().version, 1);
    let history: Vec<(u32, bool)> = s
        .alias_moves("t", "f", LIVE, 100)
        .await
        .unwrap()
        .iter()
        .map(|m| (m.version, m.rollback))
        .collect();
    assert_eq!(
        history,
        [
            (1, true),
            (3, false),
            (1, true),
            (2, true),
            (3, true),
            (3, false),
            (3, false),
            (2, false),
            (1, false)
        ]
    );
    assert_eq!(s.alias_moves("t", "f", LIVE, 2).await.unwrap().len(), 2);

    // What does not exist is refused, and nothing moves.
    assert!(matches!(
        s.set_alias("t", "f", LIVE, 9, None).await,
        Err(StoreError::NoSuchVersion { version: 9, .. })
    ));
    assert!(matches!(
        s.set_alias("t", "g", LIVE, 1, None).await,
        Err(StoreError::NoSuchVersion { .. })
    ));
    assert!(matches!(
        s.rollback_alias("t", "f", "staging").await,
        Err(StoreError::NoSuchAlias { .. })
    ));
    assert!(
        s.alias_version("t", "f", "staging")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(live().await, 1);

    // Aliases are bounded per function, and each one's history keeps its
    // newest moves; an alias removed takes its history with it.
    // live and canary, and 30 more.
    for i in 2..crate::MAX_ALIASES_PER_FUNCTION {
        s.set_alias("t", "f", &format!("a{i}"), 1, None)
            .await
            .unwrap();
    }
    assert!(matches!(
        s.set_alias("t", "f", "one-too-many", 1, None).await,
        Err(StoreError::TooManyAliases { max: 32, .. })
    ));
    s.set_alias("t", "f", "a2", 3, None).await.unwrap();
    assert!(s.remove_alias("t", "f", "a3").await.unwrap());
    assert!(!s.remove_alias("t", "f", "a3").await.unwrap());
    assert!(matches!(
        s.remove_alias("t", "f", LIVE).await,
        Err(StoreError::LiveAlias)
    ));
    s.set_alias("t", "f", "one-too-many", 1, None)
        .await
        .unwrap();
    let max = crate::MAX_MOVES_PER_ALIAS;
    for i in 0..max {
        s.set_alias("t", "f", "a4", 1 + i % 3, None).await.unwrap();
    }
    let kept = s.alias_moves("t", "f", "a4", max + 10).await.unwrap();
    assert_eq!(kept.len(), max as usize, "the oldest move went");
    assert_eq!(kept[0].version, 1 + (max - 1) % 3, "the newest is kept");
    assert_eq!(
        s.alias_moves("t", "f", LIVE, 100).await.unwrap().len(),
        9,
        "another alias's history is its own"
    );

    // Removing the function forgets its aliases: made again, it has none
    // until a version is promoted.
    assert!(s.delete_function("t", "f").await.unwrap());
    assert!(s.aliases("t", "f").await.unwrap().is_empty());
    assert!(s.alias_moves("t", "f", LIVE, 10).await.unwrap().is_empty());
    let again = s
        .create_version("t", "f", "dd", &spec, false)
        .await
        .unwrap();
    assert_eq!(again.version, 4);
    assert!(s.get_version("t", "f", None).await.unwrap().is_none());
    assert_eq!(
        s.get_version("t", "f", Some(4))
            .await
            .unwrap()
            .unwrap()
            .artifact,
        "dd"
    );
}

fn schedule_row(id: &str, expr: &str, next_ms: i64) -> ScheduleRow {
    ScheduleRow {
        tenant: "t".into(),
        function: "f".into(),
        id: id.into(),
        expr: expr.into(),
        catch_up: 0,
        paused: false,
        next_ms,
        fired_ms: None,
        created_ms: 1,
    }
}

fn queued(id: &str, at: i64) -> Enqueue {
    Enqueue {
        id: id.into(),
        tenant: "t".into(),
        function: "f".into(),
        target: "live".into(),
        source: "async".into(),
        request: b"req".to_vec(),
        enqueued_ms: at,
        expires_ms: at + 60_000,
        max_attempts: 3,
    }
}

fn trigger_row(function: &str, id: &str) -> crate::TriggerRow {
    crate::TriggerRow {
        tenant: "t".into(),
        function: function.into(),
        id: id.into(),
        kind: "nats".into(),
        spec: format!("{{\"stream\":\"{id}\"}}"),
        paused: false,
        created_ms: 1,
    }
}

async fn broker_bindings_keep_their_pause_across_deploys_and_are_bounded(s: &dyn Store) {
    let spec = FunctionSpec::new(Runtime::Wasm);
    for f in ["f", "g"] {
        s.create_version("t", f, "aa", &spec, true).await.unwrap();
    }
    s.set_triggers("t", "f", &[trigger_row("f", "a"), trigger_row("f", "b")])
        .await
        .unwrap();
    assert!(s.pause_trigger(("t", "f", "a"), true).await.unwrap());
    assert!(!s.pause_trigger(("t", "f", "zz"), true).await.unwrap());
    // A redeploy that keeps `a` keeps its pause and takes its new
    // settings; `b` goes, `c` comes.
    let a = crate::TriggerRow {
        spec: "{\"stream\":\"a\",\"batch\":5}".into(),
        ..trigger_row("f", "a")
    };
    s.set_triggers("t", "f", &[a, trigger_row("f", "c")])
        .await
        .unwrap();
    let kept = s.triggers(Some("t"), Some("f")).await.unwrap();
    assert_eq!(
        kept.iter()
            .map(|r| (r.id.as_str(), r.paused))
            .collect::<Vec<_>>(),
        [("a", true), ("c", false)]
    );
    assert_eq!(kept[0].spec, "{\"stream\":\"a\",\"batch\":5}");
    assert_eq!(kept[1].spec, "{\"stream\":\"c\"}");
    s.set_triggers("t", "g", &[trigger_row("g", "a")])
        .await
        .unwrap();
    assert_eq!(s.triggers(None, None).await.unwrap().len(), 3);
    assert!(s.triggers(Some("other"), None).await.unwrap().is_empty());
    assert!(s.remove_trigger(("t", "f", "c")).await.unwrap());
    assert!(!s.remove_trigger(("t", "f", "c")).await.unwrap());

    let too_many: Vec<_> = (0..=crate::MAX_TRIGGERS_PER_FUNCTION)
        .map(|i| trigger_row("f", &format!("n{i}")))
        .collect();
    assert!(matches!(
        s.set_triggers("t", "f", &too_many).await,
        Err(StoreError::TooManyTriggers {
            per: "function",
            ..
        })
    ));
    // The tenant's bound counts every function's bindings.
    for i in 0..(crate::MAX_TRIGGERS_PER_TENANT / crate::MAX_TRIGGERS_PER_FUNCTION) {
        let f = format!("h{i}");
        s.create_version("t", &f, "aa", &spec, true).await.unwrap();
        let rows: Vec<_> = (0..crate::MAX_TRIGGERS_PER_FUNCTION)
            .map(|j| trigger_row(&f, &format!("n{j}")))
            .collect();
        let set = s.set_triggers("t", &f, &rows).await;
        if i + 1 < crate::MAX_TRIGGERS_PER_TENANT / crate::MAX_TRIGGERS_PER_FUNCTION {
            set.unwrap();
        } else {
            assert!(
                matches!(set, Err(StoreError::TooManyTriggers { per: "tenant", .. })),
                "{set:?}"
            );
        }
    }

    // A removed function's bindings go with it.
    assert!(s.delete_function("t", "f").await.unwrap());
    assert!(s.triggers(Some("t"), Some("f")).await.unwrap().is_empty());
    assert_eq!(s.triggers(Some("t"), Some("g")).await.unwrap().len(), 1);
}

async fn a_schedules_tick_is_fired_once_and_a_redeploy_keeps_its_state(s: &dyn Store) {
    let spec = FunctionSpec::new(Runtime::Wasm);
    s.create_version("t", "f", "aa", &spec, true).await.unwrap();
    let (a, b) = (
        schedule_row("a", "@every 1s", 1_000),
        schedule_row("b", "* * * * *", 60_000),
    );
    s.set_schedules("t", "f", &[a.clone(), b.clone()])
        .await
        .unwrap();
    assert_eq!(
        s.schedules("t", Some("f")).await.unwrap(),
        [a.clone(), b.clone()]
    );
    assert!(s.schedules("other", None).await.unwrap().is_empty());
    let due = s.due_schedules(1_500, 10).await.unwrap();
    assert_eq!(due, std::slice::from_ref(&a), "only the tick that has come");

    // Two members saw tick 1000 due: the first moves it on and queues its
    // firing; the second, comparing against 1000, does nothing.
    let firing = queued("tick-1000", 1_000);
    assert_eq!(
        s.fire_schedule(&a, 2_000, &[firing], 100).await.unwrap(),
        Fired::Queued
    );
    assert_eq!(
        s.fire_schedule(&a, 2_000, &[queued("again", 1_000)], 100)
            .await
            .unwrap(),
        Fired::Taken
    );
    let claimed = s.claim_queued("c", 1_500, 10_000, 10, &[]).await.unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["tick-1000"],
        "one firing queued"
    );
    let now = s.schedules("t", Some("f")).await.unwrap();
    assert_eq!((now[0].next_ms, now[0].fired_ms), (2_000, Some(1_000)));

    // Paused, it is not due; resumed, it starts from the tick it is given.
    assert!(s.pause_schedule(("t", "f", "a"), true, 0).await.unwrap());
    assert!(
        s.due_schedules(i64::MAX, 10)
            .await
            .unwrap()
            .iter()
            .all(|r| r.id != "a")
    );
    let paused = schedule_row("a", "@every 1s", 2_000);
    assert_eq!(
        s.fire_schedule(&paused, 3_000, &[], 100).await.unwrap(),
        Fired::Taken,
        "a paused tick is not fired"
    );
    // With its tenant's queue at its bound, a tick moves on and queues
    // nothing.
    let b_now = s.schedules("t", Some("f")).await.unwrap()[1].clone();
    assert_eq!(
        s.fire_schedule(&b_now, 120_000, &[queued("full", 60_000)], 1)
            .await
            .unwrap(),
        Fired::Full
    );
    assert_eq!(
        s.schedules("t", Some("f")).await.unwrap()[1].next_ms,
        120_000
    );
    assert!(s.dead_letters("t", "f", 10).await.unwrap().is_empty());

    // A redeploy that keeps `a` keeps its pause and next tick; `b` goes.
    s.set_schedules(
        "t",
        "f",
        &[
            schedule_row("a", "@every 1s", 99_999),
            schedule_row("c", "@hourly", 3_600_000),
        ],
    )
    .await
    .unwrap();
    let kept = s.schedules("t", Some("f")).await.unwrap();
    assert_eq!(
        kept.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["a", "c"]
    );
    assert_eq!((kept[0].paused, kept[0].next_ms), (true, 2_000));
    assert!(
        s.pause_schedule(("t", "f", "a"), false, 7_000)
            .await
            .unwrap()
    );
    assert_eq!(s.schedules("t", Some("f")).await.unwrap()[0].next_ms, 7_000);
    assert!(s.remove_schedule("t", "f", "c").await.unwrap());
    assert!(!s.remove_schedule("t", "f", "c").await.unwrap());

    let many: Vec<_> = (0..=crate::MAX_SCHEDULES_PER_FUNCTION)
        .map(|i| schedule_row(&format!("s{i}"), "@every 1m", 60_000))
        .collect();
    assert!(matches!(
        s.set_schedules("t", "f", &many).await,
        Err(StoreError::TooManySchedules { .. })
    ));

    // A removed function's schedules and queue go with it.
    assert!(s.delete_function("t", "f").await.unwrap());
    assert!(s.schedules("t", None).await.unwrap().is_empty());
    assert!(s.queue_depths().await.unwrap().is_empty());
}

async fn queued_invocations_are_claimed_once_until_their_lease_lapses_and_settle_once(
    s: &dyn Store,
) {
    assert!(s.enqueue(&queued("one", 100), 2).await.unwrap());
    assert!(
        !s.enqueue(&queued("one", 100), 2).await.unwrap(),
        "an id is queued once"
    );
    assert!(s.enqueue(&queued("two", 200), 2).await.unwrap());
    assert!(
        matches!(
            s.enqueue(&queued("three", 300), 2).await,
            Err(StoreError::QueueFull { max: 2, .. })
        ),
        "a tenant's queue is bounded"
    );
    let depth = s.queue_depths().await.unwrap();
    assert_eq!((depth[0].ready, depth[0].oldest_ms), (2, Some(100)));

    let first = s.claim_queued("A", 1_000, 5_000, 1, &[]).await.unwrap();
    assert_eq!((first[0].id.as_str(), first[0].deliveries), ("one", 1));
    assert!(!first[0].redelivered());
    assert_eq!(first[0].request, b"req");
    let second = s.claim_queued("B", 1_000, 25_000, 10, &[]).await.unwrap();
    assert_eq!(
        second.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["two"],
        "held by A"
    );

    // A vanishes: after its lease, C gets "one" again, as a redelivery;
    // A's late answer settles nothing.
    let key = JournalKey {
        tenant: "t",
        function: "f",
        invocation: "one",
    };
    s.journal_append(&key, 0, b"kv answer").await.unwrap();
    let again = s.claim_queued("C", 6_001, 5_000, 10, &[]).await.unwrap();
    assert_eq!(
        again.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["one"]
    );
    assert!(again[0].redelivered());
    assert!(
        !s.settle_queued(&first[0], &Settle::Done).await.unwrap(),
        "A's claim lapsed"
    );
    assert_eq!(
        s.journal_read(&key).await.unwrap().len(),
        1,
        "kept for C to follow"
    );
    s.journal_sweep(i64::MAX).await.unwrap();
    assert_eq!(
        s.journal_read(&key).await.unwrap().len(),
        1,
        "a queued invocation's journal is not swept"
    );

    // C's attempt fails: tried again later, an attempt counted, its journal
    // kept for the retry, which may cut it where the failure began.
    let retry = Settle::Retry {
        visible_ms: 20_000,
        error: "boom".into(),
        refused: false,
    };
    assert!(s.settle_queued(&again[0], &retry).await.unwrap());
    s.journal_append(&key, 1, b"failed answer").await.unwrap();
    assert_eq!(s.journal_read(&key).await.unwrap().len(), 2);
    s.journal_cut(&key, 1).await.unwrap();
    assert_eq!(s.journal_read(&key).await.unwrap(), [b"kv answer".to_vec()]);
    assert!(
        s.claim_queued("D", 19_999, 5_000, 10, &[])
            .await
            .unwrap()
            .iter()
            .all(|c| c.id != "one")
    );
    let third = s.claim_queued("D", 20_000, 5_000, 10, &[]).await.unwrap();
    let one: &Claimed = third.iter().find(|c| c.id == "one").unwrap();
    assert_eq!((one.attempts, one.last_error.as_deref()), (1, Some("boom")));
    assert!(!one.redelivered());
    // Refused (nothing ran): tried again, no attempt counted.
    let refused = Settle::Retry {
        visible_ms: 20_000,
        error: "busy".into(),
        refused: true,
    };
    assert!(s.settle_queued(one, &refused).await.unwrap());
    let fourth = s.claim_queued("E", 20_000, 5_000, 10, &[]).await.unwrap();
    let one = fourth.iter().find(|c| c.id == "one").unwrap();
    assert_eq!((one.attempts, one.redelivered()), (1, false));

    // The last failure makes it a dead letter, which can be read, queued
    // again and purged.
    assert!(
        s.settle_queued(
            one,
            &Settle::Dead {
                error: "gave up".into()
            }
        )
        .await
        .unwrap()
    );
    let dead = s.dead_letters("t", "f", 10).await.unwrap();
    assert_eq!(
        (dead.len(), dead[0].id.as_str(), dead[0].attempts),
        (1, "one", 2)
    );
    assert_eq!(dead[0].error, "gave up");
    assert!(
        s.journal_read(&key).await.unwrap().is_empty(),
        "a dead letter's journal goes"
    );
    assert!(s.dead_letters("other", "f", 10).await.unwrap().is_empty());
    assert_eq!(
        s.requeue_dead(("other", "f", None), 30_000, 90_000)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        s.requeue_dead(("t", "f", Some("one")), 30_000, 90_000)
            .await
            .unwrap(),
        1
    );
    let back = s.claim_queued("F", 30_000, 5_000, 10, &[]).await.unwrap();
    let one = back.iter().find(|c| c.id == "one").unwrap();
    assert_eq!(
        (one.attempts, one.deliveries, one.expires_ms),
        (0, 1, 90_000)
    );
    assert!(
        s.settle_queued(
            one,
            &Settle::Dead {
                error: "again".into()
            }
        )
        .await
        .unwrap()
    );
    assert_eq!(s.purge_dead(("t", "f", None)).await.unwrap(), 1);
    assert!(s.dead_letters("t", "f", 10).await.unwrap().is_empty());
    let two = back.iter().find(|c| c.id == "two").unwrap();
    assert!(s.settle_queued(two, &Settle::Done).await.unwrap());
    assert!(s.queue_depths().await.unwrap().is_empty());
}

async fn claims_take_tenants_in_turns(s: &dyn Store) {
    // Tenant "flood" queued 50 before "t" queued one.
    for i in 0..50 {
        let item = Enqueue {
            tenant: "flood".into(),
            ..queued(&format!("f{i:02}"), i)
        };
        s.enqueue(&item, 100).await.unwrap();
    }
    s.enqueue(&queued("mine", 1_000), 100).await.unwrap();
    let first = s.claim_queued("c", 2_000, 60_000, 4, &[]).await.unwrap();
    let mut ids: Vec<&str> = first.iter().map(|c| c.id.as_str()).collect();
    ids.sort();
    assert_eq!(
        ids,
        ["f00", "f01", "f02", "mine"],
        "each tenant's oldest first"
    );
    // One at a time, the tenant served longest ago goes first: the
    // flood's 47 older ones do not hold back "t"'s next.
    s.enqueue(&queued("mine2", 1_500), 100).await.unwrap();
    s.enqueue(&queued("mine3", 1_600), 100).await.unwrap();
    let mut order = Vec::new();
    for _ in 0..4 {
        let one = s.claim_queued("c", 2_000, 60_000, 1, &[]).await.unwrap();
        order.push(one[0].id.clone());
    }
    assert_eq!(order, ["f03", "mine2", "f04", "mine3"], "tenants alternate");
}

async fn a_functions_dead_letters_are_bounded_oldest_first(s: &dyn Store) {
    let max = crate::MAX_DEAD_PER_FUNCTION as i64;
    for i in 0..=max {
        s.enqueue(&queued(&format!("d{i:05}"), i), u64::MAX)
            .await
            .unwrap();
    }
    let claimed = s
        .claim_queued("c", max + 1, 60_000, max as u32 + 1, &[])
        .await
        .unwrap();
    for c in &claimed {
        let dead = Settle::Dead { error: "no".into() };
        assert!(s.settle_queued(c, &dead).await.unwrap());
    }
    let kept = s.dead_letters("t", "f", 2_000).await.unwrap();
    assert_eq!(kept.len() as i64, max, "the oldest went");
    assert!(kept.iter().all(|d| d.id != "d00000"));
}
