//! `wasi:keyvalue` (0.2.0-draft: store, atomics, batch) over the
//! function's own KV, through the invocation's [`HostCtx`]: scoped to the
//! tenant and function, within its quota, on its tape, answered from the
//! tape on replay, done once on retry — as `hearth.kv_*` is for modules.
//!
//! A function has one bucket, opened as `""` or `"default"` (what Spin
//! and wasmtime's own implementation call it); any other name is
//! `no-such-store`. Keys are the same bytes a module's `hearth.kv_*` and
//! the KV API see; `list-keys` returns at most the node's KV list limit
//! in one page, and a full page has a cursor whose next page is an error
//! naming the limit (never a list that silently stops).

use hearth_host::{HostCtx, HostError};
use wasmtime::component::{HasData, Linker, Resource, ResourceTable, ResourceTableError};

use super::host::ComponentState;

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit/keyvalue",
        world: "wasi:keyvalue/imports",
        imports: { default: async | trappable },
        with: {
            "wasi:keyvalue/store.bucket": super::Bucket,
        },
        trappable_error_type: {
            "wasi:keyvalue/store.error" => super::Error,
        },
    });
}

use bindings::wasi::keyvalue::{atomics, batch, store};

/// The function's bucket (it has one; the handle carries nothing).
pub struct Bucket;

/// Why a keyvalue call failed, before it becomes the WIT `error`.
pub enum Error {
    NoSuchStore,
    Other(String),
}

impl From<ResourceTableError> for Error {
    fn from(e: ResourceTableError) -> Self {
        Error::Other(e.to_string())
    }
}

impl From<HostError> for Error {
    fn from(e: HostError) -> Self {
        Error::Other(e.to_string())
    }
}

/// What the generated host traits are implemented on: a store's table and
/// the invocation's host context.
pub(crate) struct KeyValue<'a> {
    table: &'a mut ResourceTable,
    host: Option<HostCtx>,
}

impl KeyValue<'_> {
    fn host(&self) -> Result<HostCtx, Error> {
        self.host
            .clone()
            .ok_or_else(|| Error::Other("KV is only reachable during an invocation".into()))
    }
}

struct HasKeyValue;

impl HasData for HasKeyValue {
    type Data<'a> = KeyValue<'a>;
}

pub(crate) fn add_to_linker(linker: &mut Linker<ComponentState>) -> anyhow::Result<()> {
    fn view(s: &mut ComponentState) -> KeyValue<'_> {
        let host = s.host().cloned();
        KeyValue {
            table: &mut s.table,
            host,
        }
    }
    store::add_to_linker::<_, HasKeyValue>(linker, view)?;
    atomics::add_to_linker::<_, HasKeyValue>(linker, view)?;
    batch::add_to_linker::<_, HasKeyValue>(linker, view)?;
    Ok(())
}

impl store::Host for KeyValue<'_> {
    async fn open(&mut self, identifier: String) -> Result<Resource<Bucket>, Error> {
        match identifier.as_str() {
            "" | "default" => Ok(self.table.push(Bucket)?),
            _ => Err(Error::NoSuchStore),
        }
    }

    fn convert_error(&mut self, err: Error) -> wasmtime::Result<store::Error> {
        Ok(match err {
            Error::NoSuchStore => store::Error::NoSuchStore,
            Error::Other(why) => store::Error::Other(why),
        })
    }
}

impl store::HostBucket for KeyValue<'_> {
    async fn get(&mut self, _: Resource<Bucket>, key: String) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.host()?.kv_get(key.into_bytes()).await?)
    }

    async fn set(&mut self, _: Resource<Bucket>, key: String, value: Vec<u8>) -> Result<(), Error> {
        Ok(self.host()?.kv_set(key.into_bytes(), value).await?)
    }

    async fn delete(&mut self, _: Resource<Bucket>, key: String) -> Result<(), Error> {
        self.host()?.kv_delete(key.into_bytes()).await?;
        Ok(())
    }

    async fn exists(&mut self, _: Resource<Bucket>, key: String) -> Result<bool, Error> {
        Ok(self.host()?.kv_exists(key.into_bytes()).await?)
    }

    async fn list_keys(
        &mut self,
        _: Resource<Bucket>,
        cursor: Option<u64>,
    ) -> Result<store::KeyResponse, Error> {
        // One page. A full page may not be all the keys: it says so with a
        // cursor, and asking for the next page is an error that says why,
        // rather than a list that silently stops.
        let host = self.host()?;
        let limit = host.limits().kv_max_list;
        if cursor.is_some_and(|c| c > 0) {
            return Err(Error::Other(format!(
                "the bucket has more keys than one listing holds ({limit}); Hearth lists \
                 one page: keep fewer keys, or list them by prefix through the KV API"
            )));
        }
        let keys = host.kv_list(Vec::new()).await?;
        let full = keys.len() >= limit as usize;
        Ok(store::KeyResponse {
            keys: keys
                .into_iter()
                .map(|k| String::from_utf8_lossy(&k).into_owned())
                .collect(),
            cursor: full.then_some(1),
        })
    }

    async fn drop(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<()> {
        self.table.delete(bucket)?;
        Ok(())
    }
}

impl atomics::Host for KeyValue<'_> {
    async fn increment(
        &mut self,
        _: Resource<Bucket>,
        key: String,
        delta: u64,
    ) -> Result<u64, Error> {
        Ok(self.host()?.kv_increment(key.into_bytes(), delta).await?)
    }
}

impl batch::Host for KeyValue<'_> {
    async fn get_many(
        &mut self,
        _: Resource<Bucket>,
        keys: Vec<String>,
    ) -> Result<Vec<Option<(String, Vec<u8>)>>, Error> {
        let host = self.host()?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let value = host.kv_get(key.clone().into_bytes()).await?;
            out.push(value.map(|v| (key, v)));
        }
        Ok(out)
    }

    async fn set_many(
        &mut self,
        _: Resource<Bucket>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> Result<(), Error> {
        let host = self.host()?;
        for (key, value) in key_values {
            host.kv_set(key.into_bytes(), value).await?;
        }
        Ok(())
    }

    async fn delete_many(&mut self, _: Resource<Bucket>, keys: Vec<String>) -> Result<(), Error> {
        let host = self.host()?;
        for key in keys {
            host.kv_delete(key.into_bytes()).await?;
        }
        Ok(())
    }
}
