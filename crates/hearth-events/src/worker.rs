//! Running queued invocations: claim, dispatch, settle.
//!
//! A claim hides an invocation for the lease; the attempt runs with the
//! invocation's own id and, if an earlier claim vanished without settling
//! it, follows that claim's journal. How it ended settles it: done; failed
//! and tried again after `backoff · 2^attempts` (to `backoff_max`, minus a
//! random half: jitter, so failures that came together do not return
//! together); refused (nothing ran) and tried again shortly without
//! counting; failed for the last time, or past its age, and dead.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hearth_core::{GatewayAttempt, InvocationId, Request, unix_time_ms};
use hearth_store::{Claimed, Settle, Store};
use parking_lot::Mutex;
use rand::RngExt;
use tokio::sync::{Notify, Semaphore};

use crate::{Dispatch, Dispatched, EventsConfig, Target};

/// How long a refused invocation waits before it is claimed again.
pub(crate) const REFUSED_DELAY: Duration = Duration::from_millis(250);

pub(crate) struct Worker {
    pub(crate) store: Arc<dyn Store>,
    dispatch: Arc<dyn Dispatch>,
    pub(crate) config: EventsConfig,
    wake: Notify,
    slots: Arc<Semaphore>,
    /// Each tenant's invocations running here now (tenants with none have
    /// no entry).
    running: Mutex<HashMap<String, usize>>,
}

/// A triggered message's room among this member's event invocations:
/// a slot, and one of its tenant's share.
pub(crate) struct Turn<'a> {
    _slot: tokio::sync::OwnedSemaphorePermit,
    _running: Running<'a>,
}

/// One of a tenant's invocations running here, counted until dropped.
struct Running<'a> {
    worker: &'a Worker,
    tenant: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = self.worker.running.lock();
        if let Some(n) = running.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.tenant);
            }
        }
        drop(running);
        // A slot, and maybe this tenant's turn, is free: claim again now.
        self.worker.wake();
    }
}

impl Worker {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        dispatch: Arc<dyn Dispatch>,
        config: EventsConfig,
    ) -> Worker {
        let slots = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
        Worker {
            store,
            dispatch,
            config,
            wake: Notify::new(),
            slots,
            running: Mutex::default(),
        }
    }

    /// Tenants with as many invocations running here as one may have.
    fn at_their_share(&self) -> Vec<String> {
        let max = self.config.max_in_flight_per_tenant.max(1);
        let running = self.running.lock();
        running
            .iter()
            .filter(|&(_, &n)| n >= max)
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// Counts one more of `tenant`'s invocations running, unless it has
    /// its share already.
    fn start(&self, tenant: &str) -> Option<Running<'_>> {
        let max = self.config.max_in_flight_per_tenant.max(1);
        let mut running = self.running.lock();
        let n = running.entry(tenant.to_owned()).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Running {
            worker: self,
            tenant: tenant.to_owned(),
        })
    }

    /// Room for one of `tenant`'s triggered messages now, if the member
    /// and the tenant have it: the queue's and the triggers' invocations
    /// share both bounds.
    pub(crate) fn event_turn(&self, tenant: &str) -> Option<Turn<'_>> {
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        let running = self.start(tenant)?;
        Some(Turn {
            _slot: slot,
            _running: running,
        })
    }

    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) async fn run(self: Arc<Self>) {
        // A node alone that was killed holding claims takes them back now
        // rather than after their lease.
        match self.store.release_claims().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                n,
                "queued invocations claimed before a restart claimed again"
            ),
            Err(e) => tracing::warn!(error = %e, "could not release earlier claims"),
        }
        let lease_ms = i64::try_from(self.config.lease.as_millis()).unwrap_or(i64::MAX);
        loop {
            // Claim only what can start now: a claimed invocation waiting
            // for a slot here would wait out its lease for nothing.
            let free = match self.slots.clone().acquire_owned().await {
                Ok(first) => {
                    let more = self.slots.available_permits().min(31);
                    drop(first);
                    more + 1
                }
                Err(_) => return,
            };
            let claim = InvocationId::new().to_string();
            let skip = self.at_their_share();
            let claimed = self
                .store
                .claim_queued(&claim, unix_time_ms(), lease_ms, free as u32, &skip)
                .await;
            match claimed {
                Ok(items) if !items.is_empty() => {
                    for item in items {
                        let Ok(slot) = self.slots.clone().acquire_owned().await else {
                            return;
                        };
                        let worker = self.clone();
                        tokio::spawn(async move {
                            match worker.start(&item.tenant) {
                                Some(running) => {
                                    worker.attempt(item).await;
                                    drop(running);
                                }
                                // More of its tenant's came in this claim
                                // than it had turns left: back at once.
                                None => worker.hand_back(&item).await,
                            }
                            drop(slot);
                        });
                    }
                }
                Ok(_) => {
                    let _ = tokio::time::timeout(self.config.poll, self.wake.notified()).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not claim queued invocations");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Makes a claimed invocation that did not run visible again now,
    /// counting no attempt.
    async fn hand_back(&self, item: &Claimed) {
        let settle = Settle::Retry {
            visible_ms: unix_time_ms(),
            error: "its tenant had its share of the queue's invocations running".into(),
            refused: true,
        };
        if let Err(e) = self.store.settle_queued(item, &settle).await {
            tracing::warn!(
                error = %e, id = item.id,
                "could not hand back a queued invocation; it will be claimed again after its lease"
            );
        }
    }

    /// Runs one claimed invocation and settles it.
    async fn attempt(&self, item: Claimed) {
        let now = unix_time_ms();
        let settle = if now > item.expires_ms {
            self.given_up(&item, "it was not run within its max age".into())
        } else {
            match decode(&item) {
                Err(why) => self.given_up(&item, why),
                Ok((request, id)) => {
                    // Every attempt after the first follows the journal of
                    // those before it (up to its first failed answer).
                    let attempt = GatewayAttempt {
                        id,
                        retry: item.redelivered() || item.attempts > 0,
                        queued: true,
                    };
                    let target = Target {
                        tenant: &item.tenant,
                        function: &item.function,
                        pin: &item.target,
                    };
                    let done = self.dispatch.dispatch(target, request, attempt).await;
                    self.settlement(&item, done)
                }
            }
        };
        match self.store.settle_queued(&item, &settle).await {
            Ok(true) => {}
            Ok(false) => tracing::info!(
                id = item.id,
                "a queued invocation's claim lapsed before it settled; another claimer has it"
            ),
            Err(e) => tracing::warn!(
                error = %e, id = item.id,
                "could not settle a queued invocation; it will be claimed again after its lease"
            ),
        }
    }

    fn settlement(&self, item: &Claimed, done: Dispatched) -> Settle {
        let now = unix_time_ms();
        let why = match done {
            Dispatched::Answered(status) if status < 500 => return Settle::Done,
            Dispatched::Answered(status) => format!("it answered {status}"),
            Dispatched::Failed(why) => why,
            Dispatched::Refused(why) => {
                return Settle::Retry {
                    visible_ms: now + millis(REFUSED_DELAY),
                    error: why,
                    refused: true,
                };
            }
            Dispatched::Gone(why) => return self.given_up(item, why),
        };
        if item.attempts + 1 >= item.max_attempts {
            return self.given_up(
                item,
                format!(
                    "attempt {} of {} failed: {why}",
                    item.attempts + 1,
                    item.max_attempts
                ),
            );
        }
        Settle::Retry {
            visible_ms: now + millis(backoff(&self.config, item.attempts)),
            error: format!("attempt {} failed: {why}", item.attempts + 1),
            refused: false,
        }
    }

    /// A dead letter, said in the function's log.
    fn given_up(&self, item: &Claimed, why: String) -> Settle {
        self.dispatch.note(
            &item.tenant,
            &item.function,
            "error",
            &format!(
                "queued invocation {} ({}) is a dead letter: {why} (`hearth dlq {}` lists them)",
                item.id, item.source, item.function
            ),
        );
        Settle::Dead { error: why }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The delay before the retry after `attempts` failures: doubling from
/// `backoff` to `backoff_max`, less a random part of up to half.
pub(crate) fn backoff(config: &EventsConfig, attempts: u32) -> Duration {
    let full = config
        .backoff
        .saturating_mul(1 << attempts.min(20))
        .min(config.backoff_max);
    let half = full / 2;
    half + half.mul_f64(rand::rng().random::<f64>())
}

fn decode(item: &Claimed) -> Result<(Request, InvocationId), String> {
    let request = postcard::from_bytes(&item.request)
        .map_err(|e| format!("its queued request does not decode ({e})"))?;
    let id = item
        .id
        .parse()
        .map_err(|_| format!("its id {:?} is not an invocation id", item.id))?;
    Ok((request, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_jitters_within_half() {
        let config = EventsConfig::default();
        for attempts in 0..12 {
            let full = (Duration::from_secs(1) * (1 << attempts)).min(Duration::from_secs(300));
            for _ in 0..50 {
                let d = backoff(&config, attempts);
                assert!(d >= full / 2 && d <= full, "{attempts}: {d:?}");
            }
        }
        let spread: std::collections::HashSet<_> =
            (0..50).map(|_| backoff(&config, 3).as_millis()).collect();
        assert!(spread.len() > 10, "jittered");
    }
}
