//! Invocations a cluster's gateway forwards: the gateway's id for them,
//! the retry journal a first attempt writes, and the host a retry gets
//! from it (`HostCtx::journaling`, `docs/cluster.md`).

use hearth_core::GatewayAttempt;
use hearth_host::{HostCtx, InvocationMeta, Tape};
use hearth_store::LogStream;

use super::Node;

impl Node {
    /// The host of a first attempt: plain, or journaling if a gateway may
    /// retry it elsewhere, or for a gateway's retry, following what the
    /// first attempt journaled.
    pub(crate) async fn host_for(
        &self,
        forwarded: Option<GatewayAttempt>,
        meta: &InvocationMeta,
    ) -> HostCtx {
        let services = self.host.clone();
        match forwarded {
            None => HostCtx::new(services, meta.clone()),
            Some(GatewayAttempt { retry: false, .. }) => {
                HostCtx::journaling(services, meta.clone())
            }
            Some(GatewayAttempt {
                retry: true,
                queued,
                ..
            }) => {
                let journal = if queued {
                    HostCtx::journal_to_retry(&services, meta).await
                } else {
                    HostCtx::journal_tape(&services, meta).await
                };
                let whose = if queued {
                    "a queued invocation"
                } else {
                    "an invocation whose node failed"
                };
                let (tape, note) = match journal {
                    Ok(tape) => {
                        let note = format!(
                            "retry of {whose}: {} answer(s) its first attempt got from KV and HTTP are given again",
                            tape.events.len()
                        );
                        (tape, note)
                    }
                    Err(e) => (
                        Tape::default(),
                        format!(
                            "retry of {whose}; its journal could not be read ({e}), so its host calls go to the world again"
                        ),
                    ),
                };
                // A queued invocation may be delivered again: what this
                // attempt asks beyond the journal joins it.
                let host = if queued {
                    HostCtx::retrying_journaled(services, meta.clone(), tape)
                } else {
                    HostCtx::retrying(services, meta.clone(), tape)
                };
                host.log(LogStream::System, "warn", &note);
                host
            }
        }
    }

    /// Forgets the journal of an answered invocation sent by a gateway
    /// (`forwarded`): a retry's, or the one this attempt wrote (`host`).
    /// A queued invocation's stays until the queue settles it.
    pub(crate) fn end_journal(
        &self,
        forwarded: Option<GatewayAttempt>,
        host: &HostCtx,
        meta: &InvocationMeta,
    ) {
        if forwarded.is_some_and(|f| f.queued) {
            return;
        }
        if forwarded.is_some_and(|f| f.retry) || host.journaled() > 0 {
            self.forget_journal(meta);
        }
    }

    /// Drops an invocation's journal once it is answered, off the
    /// response's path; what is missed here the gateway's sweep removes.
    pub(crate) fn forget_journal(&self, meta: &InvocationMeta) {
        let store = self.store().clone();
        let (tenant, function) = (meta.version.tenant.clone(), meta.version.name.clone());
        let invocation = meta.id.to_string();
        tokio::spawn(async move {
            let key = hearth_store::JournalKey {
                tenant: &tenant,
                function: &function,
                invocation: &invocation,
            };
            if let Err(e) = store.journal_forget(&key).await {
                tracing::warn!(error = %e, invocation, "could not forget a retry journal");
            }
        });
    }
}
