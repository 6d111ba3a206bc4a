//! Retry journals: the answers a first attempt got from KV and HTTP,
//! written to the shared store before the function sees them, so that a
//! gateway's retry on another node can be given them again
//! (`docs/cluster.md`).

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use hearth_store::{JournalKey, LogStream};

use super::{HostCtx, HostError, HostServices, Inner, InvocationMeta};
use crate::{CallTime, HostEvent, Tape};

impl HostCtx {
    /// A host for the first attempt at an invocation a cluster's gateway
    /// would retry on another node if this one died: every answer from KV
    /// and outbound HTTP is also written to the shared store's journal
    /// under the invocation's id before the function sees it. The retry
    /// reads the journal back ([`journal_tape`](Self::journal_tape)) and
    /// follows it as [`retrying`](Self::retrying) does, so the effects the
    /// first attempt had are not had twice. Clocks, randomness and logs are
    /// not journaled: the retry reads its own.
    pub fn journaling(services: Arc<HostServices>, meta: InvocationMeta) -> Self {
        HostCtx(Arc::new(Inner {
            meta,
            services,
            recorded: Mutex::default(),
            earlier: None,
            journal: Some(AtomicU32::new(0)),
            settled: tokio::sync::Notify::new(),
        }))
    }

    /// What a first attempt journaled for invocation `meta.id` (see
    /// [`journaling`](Self::journaling)), as a tape to retry from. An
    /// entry that does not decode ends the tape there: the retry then
    /// goes to the world from that call on.
    pub async fn journal_tape(
        services: &HostServices,
        meta: &InvocationMeta,
    ) -> Result<Tape, HostError> {
        let invocation = meta.id.to_string();
        let key = JournalKey {
            tenant: &meta.version.tenant,
            function: &meta.version.name,
            invocation: &invocation,
        };
        let entries = services
            .store
            .journal_read(&key)
            .await
            .map_err(|e| HostError::Storage(e.to_string()))?;
        Ok(Tape::of(
            entries
                .iter()
                .map_while(|bytes| postcard::from_bytes(bytes).ok())
                .collect(),
        ))
    }

    /// What the earlier attempts of queued invocation `meta.id` journaled,
    /// up to their first failed answer ([`HostEvent::failed`]), for its
    /// next attempt to follow: the effects they made are given again, the
    /// failed call and all after it are asked again. The stored journal is
    /// cut there too, so the next attempt journals on from it.
    pub async fn journal_to_retry(
        services: &HostServices,
        meta: &InvocationMeta,
    ) -> Result<Tape, HostError> {
        let mut tape = Self::journal_tape(services, meta).await?;
        let cut = tape
            .events
            .iter()
            .position(HostEvent::failed)
            .unwrap_or(tape.events.len());
        tape.events.truncate(cut);
        let invocation = meta.id.to_string();
        let key = JournalKey {
            tenant: &meta.version.tenant,
            function: &meta.version.name,
            invocation: &invocation,
        };
        let cut = u32::try_from(cut).unwrap_or(u32::MAX);
        services
            .store
            .journal_cut(&key, cut)
            .await
            .map_err(|e| HostError::Storage(e.to_string()))?;
        Ok(tape)
    }

    /// How many answers this host journaled.
    pub fn journaled(&self) -> u32 {
        self.0
            .journal
            .as_ref()
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// The host for the js tier's fallback to the process tier, which runs
    /// the same invocation again from the start: it answers the calls this
    /// attempt made as this attempt got them, then whatever this attempt
    /// was still following but had not reached (a gateway's retry falling
    /// back follows the whole journal), then goes to the world. If this
    /// attempt journals, so does the fallback, from where it stopped: its
    /// new calls join the journal, and a retry on another node after a
    /// failure inside the fallback repeats none of them.
    pub fn fall_back(&self) -> HostCtx {
        let (mut tape, _) = self.take_records();
        if let Some(earlier) = &self.0.earlier {
            for (event, time) in earlier.rest() {
                tape.push(event, time);
            }
        }
        HostCtx(Arc::new(Inner {
            meta: self.0.meta.clone(),
            services: self.0.services.clone(),
            recorded: Mutex::default(),
            earlier: Some(crate::replay::Earlier::new(
                crate::replay::Follow::ThenLive,
                tape,
            )),
            journal: self
                .0
                .journal
                .as_ref()
                .map(|n| AtomicU32::new(n.load(Ordering::Relaxed))),
            settled: tokio::sync::Notify::new(),
        }))
    }

    /// Records a live answer from KV or HTTP, journaling it first if this
    /// host journals. A journal that cannot be written costs the retry its
    /// replay of this answer, not the invocation: it is logged, once.
    pub(super) async fn record_effect(&self, event: HostEvent, began: std::time::Instant) {
        let time = CallTime::since(self.0.meta.started, began);
        if let Some(next) = &self.0.journal {
            let seq = next.fetch_add(1, Ordering::Relaxed);
            let bytes = postcard::to_allocvec(&event).expect("host events always encode");
            let invocation = self.0.meta.id.to_string();
            let written = self
                .store_call(async {
                    let (s, tenant, function) = self.scope();
                    let key = JournalKey {
                        tenant,
                        function,
                        invocation: &invocation,
                    };
                    s.journal_append(&key, seq, &bytes).await
                })
                .await;
            if let Err(e) = written
                && !self.recorded().journal_failed
            {
                self.recorded().journal_failed = true;
                self.log(
                    LogStream::System,
                    "warn",
                    &format!(
                        "could not journal a host answer for a retry on another node ({e}); a retry would repeat it"
                    ),
                );
            }
        }
        let max = self.tape_budget();
        self.recorded().push(event, max, true, Some(time));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::ctx;
    use super::*;
    use crate::HostLimits;

    #[tokio::test]
    async fn a_retry_from_the_journal_gets_the_first_attempts_answers_and_repeats_no_effect() {
        let dir = tempfile::tempdir().unwrap();
        let first = ctx(&dir, HostLimits::default());
        let (services, meta) = (first.0.services.clone(), first.0.meta.clone());
        // The first attempt: read a counter, bump it, then its node dies.
        let journaling = HostCtx::journaling(services.clone(), meta.clone());
        assert_eq!(journaling.kv_get(b"n".to_vec()).await.unwrap(), None);
        journaling
            .kv_set(b"n".to_vec(), b"1".to_vec())
            .await
            .unwrap();
        assert_eq!(journaling.journaled(), 2);
        drop(journaling);

        // The retry runs the same code: it must see the counter as the
        // first attempt did (not the live 1), and its write must not happen
        // again: the key is removed behind its back, and stays removed.
        assert!(services.store.kv_delete("t", "f", b"n").await.unwrap());
        let tape = HostCtx::journal_tape(&services, &meta).await.unwrap();
        assert_eq!(tape.events.len(), 2);
        let retry = HostCtx::retrying(services.clone(), meta.clone(), tape);
        services
            .store
            .kv_set("t", "f", b"n", b"1", u64::MAX)
            .await
            .unwrap();
        assert_eq!(
            retry.kv_get(b"n".to_vec()).await.unwrap(),
            None,
            "the journal's answer"
        );
        services.store.kv_delete("t", "f", b"n").await.unwrap();
        retry.kv_set(b"n".to_vec(), b"1".to_vec()).await.unwrap();
        // Past the journal calls are live again, and see no second write.
        assert_eq!(retry.kv_get(b"n".to_vec()).await.unwrap(), None);
        assert_eq!(retry.journaled(), 0, "a retry does not journal");
        let key = JournalKey {
            tenant: "t",
            function: "f",
            invocation: &meta.id.to_string(),
        };
        services.store.journal_forget(&key).await.unwrap();
        assert!(
            HostCtx::journal_tape(&services, &meta)
                .await
                .unwrap()
                .events
                .is_empty()
        );
        // A host that does not journal writes nothing.
        let plain = HostCtx::new(services.clone(), meta.clone());
        plain.kv_set(b"m".to_vec(), b"x".to_vec()).await.unwrap();
        assert!(services.store.journal_read(&key).await.unwrap().is_empty());
    }

    /// A js function that falls back to the process tier inside a first
    /// attempt journals on: the fallback's new calls join the journal; and
    /// a retry elsewhere that falls back too follows the whole journal.
    #[tokio::test]
    async fn a_fallback_journals_on_and_a_retry_that_falls_back_follows_it_all() {
        let dir = tempfile::tempdir().unwrap();
        let first = ctx(&dir, HostLimits::default());
        let (services, meta) = (first.0.services.clone(), first.0.meta.clone());
        let kv = async |k: &str| services.store.kv_get("t", "f", k.as_bytes()).await.unwrap();

        // Node A: the isolate reads and bumps a counter, then cannot go on.
        let isolate = HostCtx::journaling(services.clone(), meta.clone());
        assert_eq!(isolate.kv_get(b"n".to_vec()).await.unwrap(), None);
        isolate.kv_set(b"n".to_vec(), b"1".to_vec()).await.unwrap();
        // Its fallback runs the same code from the start: the two calls are
        // answered from the isolate's tape (the counter stays at 1, not 2),
        // then it writes a second key, live and journaled.
        let fallback = isolate.fall_back();
        assert_eq!(fallback.kv_get(b"n".to_vec()).await.unwrap(), None);
        fallback.kv_set(b"n".to_vec(), b"1".to_vec()).await.unwrap();
        fallback.kv_set(b"m".to_vec(), b"x".to_vec()).await.unwrap();
        assert_eq!(fallback.journaled(), 3, "two from the isolate, one its own");
        assert_eq!(
            (kv("n").await, kv("m").await),
            (Some(b"1".to_vec()), Some(b"x".to_vec()))
        );
        let tape = HostCtx::journal_tape(&services, &meta).await.unwrap();
        assert_eq!(tape.events.len(), 3);

        // Node A dies. Node B's retry starts in the isolate again: it gets
        // the first answer, falls back, and its fallback follows the rest
        // of the journal: nothing is written twice (the keys are changed
        // behind its back, and stay as they are).
        services
            .store
            .kv_set("t", "f", b"n", b"7", u64::MAX)
            .await
            .unwrap();
        services
            .store
            .kv_set("t", "f", b"m", b"y", u64::MAX)
            .await
            .unwrap();
        let isolate = HostCtx::retrying(services.clone(), meta.clone(), tape);
        assert_eq!(isolate.kv_get(b"n".to_vec()).await.unwrap(), None);
        let fallback = isolate.fall_back();
        assert_eq!(fallback.kv_get(b"n".to_vec()).await.unwrap(), None);
        fallback.kv_set(b"n".to_vec(), b"1".to_vec()).await.unwrap();
        fallback.kv_set(b"m".to_vec(), b"x".to_vec()).await.unwrap();
        assert_eq!(
            (kv("n").await, kv("m").await),
            (Some(b"7".to_vec()), Some(b"y".to_vec()))
        );
        // Past the journal, calls are live.
        assert_eq!(
            fallback.kv_get(b"n".to_vec()).await.unwrap(),
            Some(b"7".to_vec())
        );
        assert_eq!(fallback.journaled(), 0, "a retry does not journal");
    }
}
