//! KV, scoped to the invocation's tenant and function: every call goes
//! through [`HostCtx::kv_call`], which does once what each needs (the key
//! checked, the call counted until it ends, an earlier tape's answer
//! given again, room on the tape, the disk asked before a write, the
//! store asked within the deadline, the answer taped and journaled); each
//! call says only what it asks and how its answer is taped.

use std::time::Instant;

use hearth_store::StoreError;
use opentelemetry::KeyValue;

use super::{HostCtx, HostError};
use crate::HostEvent;

/// A kind of KV call: its span's name, and whether it may make the
/// tenant's KV bigger (then a full disk refuses it).
struct Op {
    name: &'static str,
    grows: bool,
}

impl Op {
    /// Its span's attributes, by OpenTelemetry's database conventions:
    /// the KV is the system, a tenant's KV the namespace, a function's
    /// keys the collection. The key itself is not on the span (a span
    /// leaves the node in the clear; a key may be the tenant's data), only
    /// its length.
    fn attributes(&self, tenant: &str, function: &str, key: &[u8]) -> Vec<KeyValue> {
        vec![
            KeyValue::new("db.system.name", "hearth.kv"),
            KeyValue::new(
                "db.operation.name",
                self.name.strip_prefix("kv.").unwrap_or(self.name),
            ),
            KeyValue::new("db.namespace", tenant.to_string()),
            KeyValue::new("db.collection.name", function.to_string()),
            KeyValue::new("hearth.kv.key_bytes", key.len() as i64),
        ]
    }
}

const GET: Op = Op {
    name: "kv.get",
    grows: false,
};
const EXISTS: Op = Op {
    name: "kv.exists",
    grows: false,
};
const SET: Op = Op {
    name: "kv.set",
    grows: true,
};
const DELETE: Op = Op {
    name: "kv.delete",
    grows: false,
};
const INCREMENT: Op = Op {
    name: "kv.increment",
    grows: true,
};
const LIST: Op = Op {
    name: "kv.list",
    grows: false,
};

impl HostCtx {
    /// One KV call of kind `op` about `key`. `asked` is the call as a
    /// tape shows it; `same` finds its answer in an earlier tape's event;
    /// `run` asks the store (a future, begun only if the call gets that
    /// far); `taped` is the event that keeps the answer.
    async fn kv_call<T>(
        &self,
        op: Op,
        key: &[u8],
        asked: impl FnOnce() -> HostEvent,
        same: impl FnOnce(&HostEvent) -> Option<T>,
        run: impl Future<Output = Result<T, StoreError>>,
        taped: impl FnOnce(&T) -> HostEvent,
    ) -> Result<T, HostError> {
        self.check_key(key)?;
        let _call = self.begin_call()?;
        if let Some(answer) = self.earlier(true, || asked().call(), same) {
            return answer;
        }
        self.check_tape_room()?;
        if op.grows {
            self.0.services.admit_growth()?;
        }
        let began = Instant::now();
        let mut span = self.call_span(op.name, || {
            let (_, tenant, function) = self.scope();
            op.attributes(tenant, function, key)
        });
        let answer = self.store_call(run).await;
        let event = answer.as_ref().ok().map(taped);
        if let Some(span) = &mut span {
            match (&answer, &event) {
                (Err(e), _) => span.failed(e.kind(), e.to_string()),
                (_, Some(HostEvent::KvList { keys, .. })) => span.set(KeyValue::new(
                    "db.response.returned_rows",
                    keys.len() as i64,
                )),
                _ => {}
            }
        }
        drop(span);
        if let Some(event) = event {
            self.record_effect(event, began).await;
        }
        answer
    }

    fn check_key(&self, key: &[u8]) -> Result<(), HostError> {
        let max = self.0.services.limits.kv_max_key_bytes;
        if key.len() > max {
            return Err(HostError::Invalid(format!(
                "KV key longer than {max} bytes"
            )));
        }
        Ok(())
    }

    pub async fn kv_get(&self, key: Vec<u8>) -> Result<Option<Vec<u8>>, HostError> {
        self.kv_call(
            GET,
            &key,
            || HostEvent::KvGet {
                key: key.clone(),
                value: None,
            },
            |e| match e {
                HostEvent::KvGet { key: k, value } if *k == key => Some(value.clone()),
                _ => None,
            },
            {
                let (s, t, f) = self.scope();
                s.kv_get(t, f, &key)
            },
            |value| HostEvent::KvGet {
                key: key.clone(),
                value: value.clone(),
            },
        )
        .await
    }

    /// Whether `key` holds a value. The tape keeps the answer, not the
    /// value (a `kv_get` would tape all of it).
    pub async fn kv_exists(&self, key: Vec<u8>) -> Result<bool, HostError> {
        self.kv_call(
            EXISTS,
            &key,
            || HostEvent::KvExists {
                key: key.clone(),
                exists: false,
            },
            |e| match e {
                HostEvent::KvExists { key: k, exists } if *k == key => Some(*exists),
                _ => None,
            },
            {
                let (s, t, f) = self.scope();
                s.kv_exists(t, f, &key)
            },
            |&exists| HostEvent::KvExists {
                key: key.clone(),
                exists,
            },
        )
        .await
    }

    pub async fn kv_set(&self, key: Vec<u8>, value: Vec<u8>) -> Result<(), HostError> {
        let max = self.0.services.limits.kv_max_value_bytes;
        if value.len() > max {
            return Err(HostError::TooLarge(max));
        }
        let quota = self.0.services.limits.kv_max_tenant_bytes;
        self.kv_call(
            SET,
            &key,
            || HostEvent::KvSet {
                key: key.clone(),
                value: value.clone(),
            },
            |e| match e {
                HostEvent::KvSet { key: k, value: v } if *k == key && *v == value => Some(()),
                _ => None,
            },
            {
                let (s, t, f) = self.scope();
                s.kv_set(t, f, &key, &value, quota)
            },
            |()| HostEvent::KvSet {
                key: key.clone(),
                value: value.clone(),
            },
        )
        .await
    }

    pub async fn kv_delete(&self, key: Vec<u8>) -> Result<bool, HostError> {
        self.kv_call(
            DELETE,
            &key,
            || HostEvent::KvDelete {
                key: key.clone(),
                existed: false,
            },
            |e| match e {
                HostEvent::KvDelete { key: k, existed } if *k == key => Some(*existed),
                _ => None,
            },
            {
                let (s, t, f) = self.scope();
                s.kv_delete(t, f, &key)
            },
            |&existed| HostEvent::KvDelete {
                key: key.clone(),
                existed,
            },
        )
        .await
    }

    /// Adds `delta` to the counter at `key` atomically (a decimal number
    /// as text; absent counts from 0): the new value. A value that is not
    /// a counter is an answer (taped, given again), not a failure.
    pub async fn kv_increment(&self, key: Vec<u8>, delta: u64) -> Result<u64, HostError> {
        let quota = self.0.services.limits.kv_max_tenant_bytes;
        let result = self
            .kv_call(
                INCREMENT,
                &key,
                || HostEvent::KvIncrement {
                    key: key.clone(),
                    delta,
                    result: Ok(0),
                },
                |e| match e {
                    HostEvent::KvIncrement {
                        key: k,
                        delta: d,
                        result,
                    } if *k == key && *d == delta => Some(result.clone()),
                    _ => None,
                },
                async {
                    let (s, t, f) = self.scope();
                    match s.kv_increment(t, f, &key, delta, quota).await {
                        Ok(n) => Ok(Ok(n)),
                        Err(e @ StoreError::KvNotACounter(_)) => Ok(Err(e.to_string())),
                        Err(e) => Err(e),
                    }
                },
                |result| HostEvent::KvIncrement {
                    key: key.clone(),
                    delta,
                    result: result.clone(),
                },
            )
            .await?;
        result.map_err(HostError::Invalid)
    }

    pub async fn kv_list(&self, prefix: Vec<u8>) -> Result<Vec<Vec<u8>>, HostError> {
        let limit = self.0.services.limits.kv_max_list;
        self.kv_call(
            LIST,
            &prefix,
            || HostEvent::KvList {
                prefix: prefix.clone(),
                keys: vec![],
            },
            |e| match e {
                HostEvent::KvList { prefix: p, keys } if *p == prefix => Some(keys.clone()),
                _ => None,
            },
            {
                let (s, t, f) = self.scope();
                s.kv_list(t, f, &prefix, limit)
            },
            |keys| HostEvent::KvList {
                prefix: prefix.clone(),
                keys: keys.clone(),
            },
        )
        .await
    }
}
