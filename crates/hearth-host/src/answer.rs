//! Work after the response (`ctx.waitUntil`): an invocation that answers
//! its caller before it ends.
//!
//! A tier that has the response while the function still has work to
//! finish hands the response to [`Answer::early`]; the node sends it to
//! the caller at once and lets the invocation run on (to its deadline at
//! most), holding its room (the node's permit, the tenant's share) until
//! it ends, then counts and tapes it whole. How many of a tenant's
//! invocations may be working after their response at once is bounded
//! ([`AfterResponse`]); past the bound the caller simply waits for the
//! work, so nothing is lost. Removing a function [cuts](Answer::cut) the
//! work its invocations still do after their response.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use hearth_core::Response;
use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};

/// The node's count of invocations working after their response, per
/// tenant, and which they are (so a removal can cut them).
pub struct AfterResponse {
    max_per_tenant: usize,
    running: Mutex<HashMap<Box<str>, Vec<Weak<Answer>>>>,
}

impl AfterResponse {
    pub fn new(max_per_tenant: usize) -> Arc<AfterResponse> {
        Arc::new(AfterResponse {
            max_per_tenant,
            running: Mutex::default(),
        })
    }

    /// Where an invocation of `tenant`'s `function` may answer early, and
    /// the receiving end the node waits on beside the invocation.
    pub fn answer(
        self: &Arc<Self>,
        tenant: &str,
        function: &str,
    ) -> (Arc<Answer>, oneshot::Receiver<Response>) {
        let (tx, rx) = oneshot::channel();
        let answer = Arc::new(Answer {
            after: self.clone(),
            tenant: tenant.into(),
            function: function.into(),
            tx: Mutex::new(Some(tx)),
            counted: AtomicBool::new(false),
            cut: AtomicBool::new(false),
            cut_now: Notify::new(),
        });
        (answer, rx)
    }

    /// How many of `tenant`'s invocations are working after their
    /// response now.
    pub fn running(&self, tenant: &str) -> usize {
        self.running.lock().get(tenant).map_or(0, Vec::len)
    }

    /// Whether any invocation of `tenant`'s `function` is working after
    /// its response now.
    pub fn working(&self, tenant: &str, function: &str) -> bool {
        self.running.lock().get(tenant).is_some_and(|list| {
            list.iter()
                .filter_map(Weak::upgrade)
                .any(|a| &*a.function == function)
        })
    }

    /// How many invocations are working after their response now.
    pub fn total(&self) -> usize {
        self.running.lock().values().map(Vec::len).sum()
    }

    /// Cuts the work after the response of every invocation of
    /// `tenant`'s `function` (it was removed); how many.
    pub fn cut(&self, tenant: &str, function: &str) -> usize {
        let answers: Vec<Arc<Answer>> = self
            .running
            .lock()
            .get(tenant)
            .into_iter()
            .flatten()
            .filter_map(Weak::upgrade)
            .filter(|a| &*a.function == function)
            .collect();
        for a in &answers {
            a.cut.store(true, Ordering::Release);
            a.cut_now.notify_waiters();
        }
        answers.len()
    }

    fn release(&self, answer: &Answer) {
        let mut running = self.running.lock();
        if let Some(list) = running.get_mut(&answer.tenant) {
            list.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), answer));
            if list.is_empty() {
                running.remove(&answer.tenant);
            }
        }
    }
}

/// One invocation's way to answer before it ends.
pub struct Answer {
    after: Arc<AfterResponse>,
    tenant: Box<str>,
    function: Box<str>,
    tx: Mutex<Option<oneshot::Sender<Response>>>,
    /// Whether it counts among its tenant's invocations working after
    /// their response.
    counted: AtomicBool,
    cut: AtomicBool,
    cut_now: Notify,
}

impl Answer {
    /// Sends `response` to the caller now, if this invocation has not
    /// answered yet and its tenant has room for one more invocation
    /// working after its response; true if it went. Otherwise the
    /// response goes when the invocation ends, as any does.
    pub fn early(self: &Arc<Self>, response: &Response) -> bool {
        let mut tx = self.tx.lock();
        if tx.is_none() || !self.take_turn() {
            return false;
        }
        let sent = tx
            .take()
            .is_some_and(|tx| tx.send(response.clone()).is_ok());
        if !sent {
            self.end();
        }
        sent
    }

    /// For a streamed response, whose caller is told it is whole by the
    /// sink: whether this invocation may end its caller's body now and
    /// work on (its tenant has room); it then counts as
    /// [`early`](Self::early) does.
    pub fn early_streamed(self: &Arc<Self>) -> bool {
        let mut tx = self.tx.lock();
        if tx.is_none() || !self.take_turn() {
            return false;
        }
        tx.take();
        true
    }

    /// Counts this invocation among its tenant's working after their
    /// response, if there is room.
    fn take_turn(self: &Arc<Self>) -> bool {
        let mut running = self.after.running.lock();
        let list = running.entry(self.tenant.clone()).or_default();
        list.retain(|w| w.strong_count() > 0);
        if list.len() >= self.after.max_per_tenant {
            return false;
        }
        list.push(Arc::downgrade(self));
        self.counted.store(true, Ordering::Release);
        true
    }

    /// Whether the caller has its response already.
    pub fn answered(&self) -> bool {
        self.counted.load(Ordering::Acquire)
    }

    /// Whether its function was removed while it worked after its
    /// response: the work stops.
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// Resolves once the work is cut (never, if it is not).
    pub async fn cut_notified(&self) {
        let notified = self.cut_now.notified();
        if self.is_cut() {
            return;
        }
        notified.await;
    }

    /// The invocation ended: it no longer counts.
    pub fn end(&self) {
        if self.counted.swap(false, Ordering::AcqRel) {
            self.after.release(self);
        }
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("tenant", &self.tenant)
            .field("function", &self.function)
            .field("answered", &self.answered())
            .field("cut", &self.is_cut())
            .finish_non_exhaustive()
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if self.counted.load(Ordering::Acquire) {
            self.after.release(self);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Response {
        Response {
            status: 200,
            headers: Vec::new(),
            body: Default::default(),
        }
    }

    #[test]
    fn a_tenant_answers_early_up_to_its_bound_and_once_per_invocation() {
        let after = AfterResponse::new(2);
        let (a, mut ra) = after.answer("t", "f");
        let (b, _rb) = after.answer("t", "f");
        let (c, _rc) = after.answer("t", "f");
        assert!(a.early(&ok()));
        assert_eq!(ra.try_recv().unwrap().status, 200);
        assert!(!a.early(&ok()), "an invocation answers once");
        assert!(b.early(&ok()));
        assert!(!c.early(&ok()), "the tenant's third waits for its work");
        assert_eq!(after.running("t"), 2);
        // Another tenant's room is its own.
        let (d, _rd) = after.answer("u", "f");
        assert!(d.early(&ok()));
        a.end();
        assert_eq!(after.running("t"), 1);
        let (e, _re) = after.answer("t", "f");
        assert!(e.early(&ok()), "the room a finished one left");
        drop(b);
        drop(e);
        assert_eq!(after.running("t"), 0, "dropped, they no longer count");
    }

    #[test]
    fn removing_a_function_cuts_only_its_own_work_after_the_response() {
        let after = AfterResponse::new(8);
        let (f, _rf) = after.answer("t", "f");
        let (g, _rg) = after.answer("t", "g");
        let (waits, _rw) = after.answer("t", "f");
        assert!(f.early(&ok()) && g.early(&ok()));
        assert_eq!(after.cut("t", "f"), 1, "only those answered early");
        assert!(f.is_cut() && !g.is_cut() && !waits.is_cut());
    }

    #[tokio::test]
    async fn a_cut_wakes_whoever_waits_for_it() {
        let after = AfterResponse::new(8);
        let (f, _rf) = after.answer("t", "f");
        assert!(f.early(&ok()));
        let waiting = tokio::spawn({
            let f = f.clone();
            async move { f.cut_notified().await }
        });
        tokio::task::yield_now().await;
        after.cut("t", "f");
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap();
    }
}
