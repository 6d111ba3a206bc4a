//! Answering host calls from an earlier tape, in order. One mechanism
//! serves two uses that differ only in what happens off the tape:
//!
//! - **replay** ([`Follow::Strict`]): every call is answered from the tape
//!   and the world is never touched; the first call that differs is a
//!   [`Divergence`], after which effects are refused.
//! - **retry** ([`Follow::ThenLive`], the js tier's fallback): only the KV
//!   and HTTP answers of the aborted attempt are served, so each effect
//!   happens once; at the first call that differs the rest is dropped and
//!   calls go to the world.

use parking_lot::Mutex;

use crate::{CallTime, Divergence, HostError, HostEvent, Tape};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follow {
    Strict,
    ThenLive,
}

/// What an earlier tape says to one call.
pub(crate) enum Verdict<T> {
    /// Nothing: ask the world.
    Live,
    /// The recorded answer, and the event to put on this host's tape with
    /// when it ran the first time (if the tape says).
    Recorded(T, HostEvent, Option<CallTime>),
    /// A strict replay is off its tape.
    OffTape(HostError),
    /// A retry just stopped following its tape, skipping this many calls;
    /// ask the world.
    LeftTape(usize),
}

pub(crate) struct Earlier {
    follow: Follow,
    cursor: Mutex<Cursor>,
}

struct Cursor {
    /// The calls to follow, each with when it ran, if its tape said.
    events: Vec<(HostEvent, Option<CallTime>)>,
    next: usize,
    diverged: Option<Divergence>,
}

impl Cursor {
    /// The next call on the tape; log lines are outputs, not answers, and
    /// are stepped over.
    fn peek(&mut self) -> Option<&(HostEvent, Option<CallTime>)> {
        while matches!(self.events.get(self.next), Some((HostEvent::Log { .. }, _))) {
            self.next += 1;
        }
        self.events.get(self.next)
    }
}

/// Whether a call changes or reads the world beyond this sandbox (as
/// opposed to clocks, randomness and logs, which a retry reads afresh).
fn is_effect(e: &HostEvent) -> bool {
    matches!(
        e,
        HostEvent::KvGet { .. }
            | HostEvent::KvSet { .. }
            | HostEvent::KvDelete { .. }
            | HostEvent::KvIncrement { .. }
            | HostEvent::KvExists { .. }
            | HostEvent::KvList { .. }
            | HostEvent::HttpFetch { .. }
    )
}

impl Earlier {
    pub fn new(follow: Follow, tape: Tape) -> Earlier {
        let timed = tape.into_timed();
        let events = match follow {
            Follow::Strict => timed.collect(),
            Follow::ThenLive => timed.filter(|(e, _)| is_effect(e)).collect(),
        };
        Earlier {
            follow,
            cursor: Mutex::new(Cursor {
                events,
                next: 0,
                diverged: None,
            }),
        }
    }

    pub fn is_strict(&self) -> bool {
        self.follow == Follow::Strict
    }

    /// The tape's word on a call: `effect` says whether it is a KV or HTTP
    /// call, `asked` names it for a report, `same` gives the recorded
    /// answer if the next event on the tape is this call.
    pub fn answer<T>(
        &self,
        effect: bool,
        asked: impl FnOnce() -> String,
        same: impl FnOnce(&HostEvent) -> Option<T>,
    ) -> Verdict<T> {
        if self.follow == Follow::ThenLive && !effect {
            return Verdict::Live;
        }
        let mut c = self.cursor.lock();
        if let Some(d) = &c.diverged {
            return match self.follow {
                Follow::Strict => Verdict::OffTape(HostError::OffTape(d.to_string())),
                Follow::ThenLive => Verdict::Live,
            };
        }
        let recorded = c.peek().cloned();
        if self.follow == Follow::ThenLive && recorded.is_none() {
            return Verdict::Live;
        }
        if let Some(answer) = recorded.as_ref().and_then(|(e, _)| same(e)) {
            c.next += 1;
            let (event, time) = recorded.expect("matched");
            return Verdict::Recorded(answer, event, time);
        }
        let recorded = recorded.map(|(e, _)| e);
        let left = c.events.len() - c.next;
        let d = Divergence {
            at: c.next + 1,
            recorded: recorded.map(|e| e.call()),
            asked: Some(asked()),
        };
        let verdict = match self.follow {
            Follow::Strict => Verdict::OffTape(HostError::OffTape(d.to_string())),
            Follow::ThenLive => Verdict::LeftTape(left),
        };
        c.diverged = Some(d);
        verdict
    }

    /// What the code has not asked for yet: the tape from its next call
    /// on, or nothing once it has left the tape.
    pub fn rest(&self) -> Vec<(HostEvent, Option<CallTime>)> {
        let c = self.cursor.lock();
        if c.diverged.is_some() {
            return Vec::new();
        }
        c.events[c.next..].to_vec()
    }

    /// Where a strict replay left its tape: at a call that differs, or at a
    /// call the code never made.
    pub fn divergence(&self) -> Option<Divergence> {
        let mut c = self.cursor.lock();
        if let Some(d) = &c.diverged {
            return Some(d.clone());
        }
        let recorded = c.peek().map(|(e, _)| e.call())?;
        Some(Divergence {
            at: c.next + 1,
            recorded: Some(recorded),
            asked: None,
        })
    }
}
