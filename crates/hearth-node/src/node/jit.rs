//! The compiled path of a js function (Containerless §3–§4,
//! `docs/js-tier.md`, "Compiled from its traces"): a version that runs hot
//! in the isolate is traced there, its trace compiled to a wasm module
//! (`hearth-jit`), the module proved against the version's own tapes, and
//! only then served. Where compiled code meets what its trace did not
//! cover it leaves, and the invocation runs in the isolate.
//!
//! ```text
//!  Warming ──hot──▶ (traced variant made) ──▶ Tracing ──enough runs──▶
//!  (compiled, replayed against tapes) ──all identical──▶ Serving
//!                   any step refused, or a tape diverged ──▶ Off(why)
//! ```
//!
//! The slow steps (compiling the traced variant, the module, the proof)
//! run in a task of their own; invocations meanwhile run in the isolate.
//!
//! Once serving, live compiled invocations are checked: now and then one
//! whose tape was kept is run again in the isolate against that tape, in
//! the background, and the first that the isolate answers otherwise drops
//! the compiled version for good, naming the tape.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_core::{FunctionVersion, InvocationId, InvokeError, Request, Response, Runtime, Tier};
use hearth_host::{
    Divergence, Engine, HostCtx, HostServices, InvocationMeta, Prepared, Source, Tape,
};
use hearth_jit::{Plan, Trace};
use hearth_record::diff::outcome_diff;
use hearth_record::{Outcome, Recorder};
use hearth_store::{ArtifactStore, LogStream, TapeIndex, TapePin, TapeQuery};
use opentelemetry::KeyValue;
use parking_lot::Mutex;

use super::{Admitted, InvokeOutcome, Node, Ran};
use crate::metrics::CompiledChecks;

/// When a js function is compiled, and how it is proved.
#[derive(Debug, Clone)]
pub struct JitConfig {
    /// Invocations in the isolate after which a version is judged.
    pub hot_after: u32,
    /// Mean time per invocation in the isolate, over those, at or above
    /// which it is compiled (I/O-bound functions stay interpreted).
    pub hot_mean: Duration,
    /// Traced invocations whose traces are merged before compiling, at
    /// most: tracing ends sooner once this many in a row
    /// ([`stable_runs`](Self::stable_runs)) saw nothing new. A traced run
    /// is many times slower than a plain one.
    pub trace_runs: u32,
    pub stable_runs: u32,
    /// The version's newest tapes the module is replayed against.
    pub proof_tapes: u32,
    /// Compiled invocations of which, when this many of the last
    /// [`WINDOW`] left for the isolate, the compiled path is dropped.
    pub max_left: u32,
    /// After a live check, the node waits this many times as long as the
    /// check took before it starts the next (one runs at a time): 19
    /// keeps checking under 5% of one core.
    pub check_idle: u32,
}

impl Default for JitConfig {
    fn default() -> Self {
        JitConfig {
            hot_after: 20,
            hot_mean: Duration::from_millis(1),
            trace_runs: 10,
            stable_runs: 2,
            proof_tapes: 50,
            max_left: 50,
            check_idle: 19,
        }
    }
}

/// Compiled invocations over which leaving is counted.
const WINDOW: u32 = 100;

/// A version's phase and when it was found hot.
struct Slot {
    phase: Phase,
    hot_at: Instant,
}

impl Slot {
    fn new(phase: Phase, hot_at: Instant) -> Slot {
        Slot { phase, hot_at }
    }
}

/// Phases by tenant, function and version: nested so that the lookup on
/// every js invocation borrows its keys (as the node's `modes` do).
#[derive(Default)]
struct Phases(HashMap<String, HashMap<String, HashMap<u32, Slot>>>);

impl Phases {
    fn get(&self, v: &FunctionVersion) -> Option<&Slot> {
        self.0
            .get(v.tenant.as_str())?
            .get(v.name.as_str())?
            .get(&v.version)
    }

    fn get_mut(&mut self, v: &FunctionVersion) -> Option<&mut Slot> {
        self.0
            .get_mut(v.tenant.as_str())?
            .get_mut(v.name.as_str())?
            .get_mut(&v.version)
    }

    /// `v`'s slot, made (its names copied) the first time.
    fn entry(&mut self, v: &FunctionVersion, make: impl FnOnce() -> Slot) -> &mut Slot {
        if self.get(v).is_none() {
            self.0
                .entry(v.tenant.clone())
                .or_default()
                .entry(v.name.clone())
                .or_default()
                .insert(v.version, make());
        }
        self.get_mut(v).expect("made above")
    }
}

enum Phase {
    Warming {
        runs: u32,
        busy: Duration,
    },
    /// A task is making the next step.
    Busy,
    Tracing {
        plan: Arc<Plan>,
        traced: Arc<dyn Prepared>,
        trace: Trace,
    },
    Serving(Arc<Serving>),
    Off(String),
}

/// A proved module, serving.
pub(crate) struct Serving {
    pub(crate) plan: Arc<Plan>,
    pub(crate) prepared: Arc<dyn Prepared>,
    pub(crate) proved: usize,
    /// Compiled invocations, and how many of them left, in this window.
    window: Mutex<(u32, u32)>,
}

/// How one invocation of a js version runs.
pub(crate) enum Route {
    Isolate,
    Traced(Arc<dyn Prepared>),
    Compiled(Arc<Serving>),
}

/// What [`Jit::mode`] says of a version, for `hearth ls` and the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompiledMode {
    /// Not (yet) compiled; `Some(why)` when it will not be.
    NotCompiled(Option<String>),
    Tracing,
    Compiled {
        proved: usize,
    },
}

/// What the background steps need of the node: every piece is shared.
#[derive(Clone)]
pub(crate) struct Parts {
    pub(crate) js: Arc<dyn Engine>,
    pub(crate) wasm: Arc<dyn Engine>,
    pub(crate) artifacts: Arc<ArtifactStore>,
    pub(crate) recorder: Option<Arc<Recorder>>,
    pub(crate) host: Arc<HostServices>,
    /// Where a version's bound secrets are read and opened: its traced
    /// and compiled variants are prepared with them, as its isolate is.
    pub(crate) store: Arc<dyn hearth_store::Store>,
    pub(crate) secrets: Option<Arc<crate::SecretBox>>,
}

impl Parts {
    /// `v` with its secrets' values in its environment (itself if it
    /// binds none).
    async fn with_secrets(&self, v: &FunctionVersion) -> Result<FunctionVersion, String> {
        super::secrets::with_secret_values(self.store.as_ref(), self.secrets.as_deref(), v)
            .await
            .map(|opened| opened.unwrap_or_else(|| v.clone()))
            .map_err(|e| e.to_string())
    }
}

pub(crate) struct Jit {
    config: JitConfig,
    phases: Mutex<Phases>,
    /// Whether a live check runs, and when the next may start.
    checking: Mutex<(bool, Instant)>,
    checks: CompiledChecks,
    /// Per tenant and function, the time a secret it binds last changed:
    /// its compiled code is proved only on tapes made since, which ran
    /// with the value it is prepared with.
    tapes_from: Mutex<HashMap<(String, String), i64>>,
}

/// The right to run the one live check; given back when dropped, which
/// sets when the next may start.
pub(crate) struct CheckSlot {
    jit: Arc<Jit>,
    started: Instant,
}

impl Drop for CheckSlot {
    fn drop(&mut self) {
        let idle = self.started.elapsed() * self.jit.config.check_idle;
        *self.jit.checking.lock() = (false, Instant::now() + idle);
    }
}

impl CheckSlot {
    /// Checks `done`, a compiled invocation of `v` asked `req`, in the
    /// isolate (`isolate`, `v` prepared there), in the background
    /// ([`Jit::check`]).
    pub(crate) fn check(
        self,
        v: &Arc<FunctionVersion>,
        isolate: Arc<dyn Prepared>,
        services: Arc<HostServices>,
        pins: Option<Arc<dyn TapeIndex>>,
        req: &Request,
        done: &(InvokeOutcome, Tape),
    ) {
        let answered = Answered {
            id: done.0.id,
            request: req.clone(),
            tape: done.1.clone(),
            outcome: Outcome::of(&done.0.result),
        };
        let jit = self.jit.clone();
        jit.check(self, v, isolate, services, pins, answered);
    }
}

impl Node {
    /// Runs `req` where `v` runs now (`prepared`, in `tier`); a js
    /// version the compiled path has runs compiled or traced instead
    /// ([`Jit::route`]). Compiled code that meets what its traces did not
    /// cover leaves, and the invocation runs in the isolate with the
    /// host's answers so far (KV reads and writes, clocks, randomness)
    /// given again, so each effect happens once. A compiled answer whose
    /// tape is kept may get a slot to be checked in the isolate once the
    /// invocation is done.
    pub(super) async fn run_routed(
        &self,
        v: &Arc<FunctionVersion>,
        prepared: &Arc<dyn Prepared>,
        tier: Tier,
        req: &Request,
        mut host: HostCtx,
        admitted: &Admitted,
    ) -> Ran {
        let (route, jit) = match &self.jit {
            Some(jit) if tier == Tier::Js && !prepared.streams() => (jit.route(v), Some(jit)),
            _ => (Route::Isolate, None),
        };
        let (mut result, mut tier) = match &route {
            Route::Compiled(c) => (self.attempt(&c.prepared, req, &host).await, Tier::Compiled),
            Route::Traced(traced) => {
                host.divert_logs(hearth_jit::TRACE_PREFIX);
                (self.attempt(traced, req, &host).await, tier)
            }
            Route::Isolate => (self.attempt(prepared, req, &host).await, tier),
        };
        // Answers only: a failure's tape may be cut at the budget (a
        // replay would part from it), and a timeout would hold the one
        // check for the whole deadline.
        let mut check = None;
        if let (Some(jit), Route::Compiled(c)) = (jit, &route) {
            let left = result
                .as_ref()
                .err()
                .and_then(InvokeError::compiled_left_at);
            jit.compiled_ran(v, c, left.is_some());
            let taped = admitted.taping.is_some() && host.tape_budget_exceeded().is_none();
            if result.is_ok() && taped {
                check = jit.check_slot();
            }
            if let Some(at) = left {
                self.metrics.compiled_left();
                if let Some(t) = &admitted.meta.trace {
                    let at = KeyValue::new("hearth.left_at", at.to_string());
                    crate::trace::event(t, "compiled code left for the isolate", vec![at]);
                }
                host = host.fall_back();
                host.log(LogStream::System, "info", &left_line(&c.plan, at));
                result = self.attempt(prepared, req, &host).await;
                tier = Tier::Js;
            }
        }
        match (jit, &route) {
            (Some(jit), Route::Traced(_)) => {
                jit.traced(v, &host.take_diverted(), || self.jit_parts())
            }
            (Some(jit), Route::Isolate) if result.is_ok() => {
                jit.ran_in_isolate(v, admitted.started.elapsed(), || self.jit_parts())
            }
            _ => {}
        }
        Ran {
            result,
            tier,
            host,
            check,
        }
    }
}

/// A live compiled invocation to check: what it was asked and answered,
/// and the host's answers it was given.
pub(crate) struct Answered {
    pub(crate) id: InvocationId,
    pub(crate) request: Request,
    pub(crate) tape: Tape,
    pub(crate) outcome: Outcome,
}

impl Jit {
    pub(crate) fn new(config: JitConfig, checks: CompiledChecks) -> Jit {
        Jit {
            config,
            phases: Mutex::new(Phases::default()),
            checking: Mutex::new((false, Instant::now())),
            checks,
            tapes_from: Mutex::default(),
        }
    }

    /// Forgets every version of a function whose secret changed at
    /// `at_ms`: it is compiled again, proved on tapes made since.
    pub(crate) fn forget_secret_change(&self, tenant: &str, name: &str, at_ms: i64) {
        self.forget(tenant, name);
        self.tapes_from
            .lock()
            .insert((tenant.to_string(), name.to_string()), at_ms);
    }

    /// How `v`'s next invocation runs.
    pub(crate) fn route(&self, v: &FunctionVersion) -> Route {
        match self.phases.lock().get(v).map(|slot| &slot.phase) {
            Some(Phase::Tracing { traced, .. }) => Route::Traced(traced.clone()),
            Some(Phase::Serving(s)) => Route::Compiled(s.clone()),
            _ => Route::Isolate,
        }
    }

    /// Drops what the versions not `prepared(tenant, name, version)` hold
    /// (a traced variant, a compiled module, its plan and trace): the
    /// node's idle prepared code went, and this goes with it; such a
    /// version warms up in the isolate again. Why a version is not
    /// compiled is kept. Returns how many it dropped.
    pub(crate) fn sweep(&self, prepared: impl Fn(&str, &str, u32) -> bool) -> usize {
        let mut dropped = 0;
        let mut phases = self.phases.lock();
        for (tenant, functions) in phases.0.iter_mut() {
            for (name, versions) in functions.iter_mut() {
                versions.retain(|&version, slot| {
                    let keep =
                        matches!(slot.phase, Phase::Off(_)) || prepared(tenant, name, version);
                    dropped += usize::from(!keep);
                    keep
                });
            }
        }
        dropped
    }

    pub(crate) fn mode(&self, v: &FunctionVersion) -> CompiledMode {
        match self.phases.lock().get(v).map(|slot| &slot.phase) {
            Some(Phase::Tracing { .. }) => CompiledMode::Tracing,
            Some(Phase::Serving(s)) => CompiledMode::Compiled { proved: s.proved },
            Some(Phase::Off(why)) => CompiledMode::NotCompiled(Some(why.clone())),
            _ => CompiledMode::NotCompiled(None),
        }
    }

    /// Forgets a removed function, and when its secrets changed.
    pub(crate) fn forget_removed(&self, tenant: &str, name: &str) {
        self.forget(tenant, name);
        self.tapes_from
            .lock()
            .remove(&(tenant.to_string(), name.to_string()));
    }

    /// Forgets every version of a function (it was redeployed or removed).
    pub(crate) fn forget(&self, tenant: &str, name: &str) {
        if let Some(functions) = self.phases.lock().0.get_mut(tenant) {
            functions.remove(name);
        }
    }

    /// An invocation of `v` ran in the plain isolate for `took`: counts it,
    /// and starts making the traced variant once the version is hot.
    pub(crate) fn ran_in_isolate(
        self: &Arc<Self>,
        v: &Arc<FunctionVersion>,
        took: Duration,
        parts: impl FnOnce() -> Option<Parts>,
    ) {
        if v.spec.stream || v.spec.runtime != Runtime::Js {
            return;
        }
        let mut phases = self.phases.lock();
        let phase = &mut phases
            .entry(v, || {
                Slot::new(
                    Phase::Warming {
                        runs: 0,
                        busy: Duration::ZERO,
                    },
                    Instant::now(),
                )
            })
            .phase;
        let Phase::Warming { runs, busy } = phase else {
            return;
        };
        *runs += 1;
        *busy += took;
        if *runs < self.config.hot_after {
            return;
        }
        let mean = *busy / *runs;
        if mean < self.config.hot_mean {
            // Not CPU-bound enough to pay for itself: judged again later.
            *runs = 0;
            *busy = Duration::ZERO;
            return;
        }
        let Some(parts) = parts() else {
            *phase = Phase::Off("this node lacks the js or the wasm tier".into());
            return;
        };
        *phase = Phase::Busy;
        let hot_at = Instant::now();
        drop(phases);
        let (jit, v) = (self.clone(), v.clone());
        tokio::spawn(async move {
            let next = match traced_variant(&v, &parts).await {
                Ok((plan, traced)) => {
                    let trace = plan.trace();
                    Phase::Tracing {
                        plan,
                        traced,
                        trace,
                    }
                }
                Err(why) => Phase::Off(why),
            };
            jit.set(&v, next, hot_at);
        });
    }

    /// A traced invocation of `v` ended with these diverted lines: merges
    /// its trace, and compiles once enough runs are in.
    pub(crate) fn traced(
        self: &Arc<Self>,
        v: &Arc<FunctionVersion>,
        lines: &[String],
        parts: impl FnOnce() -> Option<Parts>,
    ) {
        let mut phases = self.phases.lock();
        let Some(Slot { phase, hot_at, .. }) = phases.get_mut(v) else {
            return;
        };
        let Phase::Tracing { trace, .. } = phase else {
            return;
        };
        for line in lines {
            trace.merge_line(line);
        }
        if trace.runs < self.config.trace_runs && trace.unchanged < self.config.stable_runs {
            return;
        }
        let Some(parts) = parts() else {
            return;
        };
        let Phase::Tracing { plan, trace, .. } = std::mem::replace(phase, Phase::Busy) else {
            unreachable!("matched above")
        };
        let hot_at = *hot_at;
        drop(phases);
        let since = self
            .tapes_from
            .lock()
            .get(&(v.tenant.clone(), v.name.clone()))
            .copied();
        let (jit, v) = (self.clone(), v.clone());
        tokio::spawn(async move {
            let next =
                match compile_and_prove(&v, &plan, &trace, &parts, (jit.config.proof_tapes, since))
                    .await
                {
                    Ok((prepared, proved)) => {
                        let ready_after = hot_at.elapsed();
                        tracing::info!(
                            tenant = v.tenant,
                            function = v.name,
                            version = v.version,
                            proved,
                            ready_after_ms = ready_after.as_millis() as u64,
                            "serving the compiled js function"
                        );
                        Phase::Serving(Arc::new(Serving {
                            plan,
                            prepared,
                            proved,
                            window: Mutex::new((0, 0)),
                        }))
                    }
                    Err(why) => Phase::Off(why),
                };
            jit.set(&v, next, hot_at);
        });
    }

    /// A compiled invocation of `v` ended, having left for the isolate or
    /// not: too many leaves and the compiled path is dropped.
    pub(crate) fn compiled_ran(&self, v: &FunctionVersion, serving: &Serving, left: bool) {
        let mut w = serving.window.lock();
        w.0 += 1;
        w.1 += u32::from(left);
        if w.1 >= self.config.max_left {
            let why = format!(
                "its compiled code left for the isolate on {} of {} invocations: the traces did not cover its traffic",
                w.1, w.0
            );
            drop(w);
            self.demote(v, why);
        } else if w.0 >= WINDOW {
            *w = (0, 0);
        }
    }

    /// The slot for a live check, if none runs and the last one's idle
    /// time is over.
    pub(crate) fn check_slot(self: &Arc<Self>) -> Option<CheckSlot> {
        let mut checking = self.checking.lock();
        if checking.0 || Instant::now() < checking.1 {
            return None;
        }
        checking.0 = true;
        Some(CheckSlot {
            jit: self.clone(),
            started: Instant::now(),
        })
    }

    /// Runs `answered`, a compiled invocation of `v`, again in the isolate
    /// (`isolate`, `v` prepared there) against its own tape, in the
    /// background; if the isolate answers otherwise, or asks the host for
    /// other calls, `v` is no longer served compiled (and the tape is
    /// pinned in `pins`, the node's tape index, if it records).
    pub(crate) fn check(
        self: &Arc<Self>,
        slot: CheckSlot,
        v: &Arc<FunctionVersion>,
        isolate: Arc<dyn Prepared>,
        services: Arc<HostServices>,
        pins: Option<Arc<dyn TapeIndex>>,
        answered: Answered,
    ) {
        let (jit, v) = (self.clone(), v.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let Answered {
                id,
                request,
                tape,
                outcome,
            } = answered;
            let (result, divergence) =
                on_tape(&isolate, services.clone(), v.clone(), &request, tape).await;
            jit.checks.checked.inc();
            let Some(how) = differs(&outcome, &result, divergence) else {
                return;
            };
            jit.checks.diverged.inc();
            pin(pins, &v, &id.to_string()).await;
            jit.demote(
                &v,
                format!(
                    "the isolate answered live invocation {id} otherwise than its compiled code \
                     did (its tape is kept: `hearth replay {id}` replays it):\n{how}"
                ),
            );
        });
    }

    /// Stops serving `v` compiled, for good (until it is redeployed).
    pub(crate) fn demote(&self, v: &FunctionVersion, why: String) {
        tracing::warn!(
            tenant = v.tenant,
            function = v.name,
            version = v.version,
            why,
            "compiled js dropped"
        );
        if let Some(slot) = self.phases.lock().get_mut(v) {
            slot.phase = Phase::Off(why);
        }
    }

    fn set(&self, v: &FunctionVersion, next: Phase, hot_at: Instant) {
        if let Phase::Off(why) = &next {
            tracing::info!(
                tenant = v.tenant,
                function = v.name,
                version = v.version,
                why,
                "js function not compiled"
            );
        }
        // Forgotten meanwhile (a redeploy): stays forgotten.
        if let Some(slot) = self.phases.lock().get_mut(v) {
            *slot = Slot::new(next, hot_at);
        }
    }
}

/// `v`'s handler with tracing calls in, prepared in the isolate.
async fn traced_variant(
    v: &FunctionVersion,
    parts: &Parts,
) -> Result<(Arc<Plan>, Arc<dyn Prepared>), String> {
    let bytes = parts
        .artifacts
        .get(&v.artifact)
        .map_err(|e| e.to_string())?;
    let bundle = hearth_host::bundle::Bundle::from_tar(&bytes).map_err(|e| e.to_string())?;
    let entry = bundle
        .entry(Runtime::Js, v.spec.handler.as_ref())
        .map_err(|e| e.to_string())?;
    let source = bundle
        .file(&entry)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or("its entry is not UTF-8 text")?
        .to_string();
    let plan = Arc::new(Plan::new(&source).map_err(|r| r.to_string())?);
    let traced = bundle
        .with_file(&entry, plan.traced_source().into_bytes())
        .to_tar();
    let compiled = parts
        .js
        .compile(&v.spec, Source::artifact(None, traced))
        .await
        .map_err(|e| format!("the traced variant does not compile: {e}"))?;
    let tv = FunctionVersion {
        artifact: parts
            .artifacts
            .put(&compiled.artifact)
            .map_err(|e| e.to_string())?,
        ..parts.with_secrets(v).await?
    };
    let code: Arc<dyn hearth_host::Artifacts> = parts.artifacts.clone();
    let prepared = parts
        .js
        .prepare(&tv, &code)
        .await
        .map_err(|e| e.to_string())?;
    Ok((plan, prepared))
}

/// Compiles what `trace` saw, and replays the version's newest tapes
/// against the module: it serves only if every response it gives is the
/// recorded one (a tape it leaves on proves nothing either way), and at
/// least one was.
async fn compile_and_prove(
    v: &Arc<FunctionVersion>,
    plan: &Plan,
    trace: &Trace,
    parts: &Parts,
    (tapes, since_ms): (u32, Option<i64>),
) -> Result<(Arc<dyn Prepared>, usize), String> {
    let wasm = plan.compile(trace).map_err(|r| r.to_string())?;
    let opened = parts.with_secrets(v).await?;
    let mut spec = opened.spec.clone();
    spec.runtime = Runtime::Wasm;
    spec.handler = None;
    let compiled = parts
        .wasm
        .compile(&spec, Source::from(wasm))
        .await
        .map_err(|e| format!("internal: the compiled module was refused: {e}"))?;
    let cv = FunctionVersion {
        artifact: parts
            .artifacts
            .put(&compiled.artifact)
            .map_err(|e| e.to_string())?,
        spec,
        ..(**v).clone()
    };
    let code: Arc<dyn hearth_host::Artifacts> = parts.artifacts.clone();
    let prepared = parts
        .wasm
        .prepare(&cv, &code)
        .await
        .map_err(|e| e.to_string())?;
    let Some(recorder) = &parts.recorder else {
        return Err(
            "recording is off, and a compiled version serves only once its tapes prove it".into(),
        );
    };
    // The version's tapes so far are written before they are read (the
    // recorder batches).
    recorder.flush().await.map_err(|e| e.to_string())?;
    let archive = recorder.archive().clone();
    let query = TapeQuery {
        function: Some(v.name.clone()),
        version: Some(v.version),
        since_ms,
        limit: tapes,
        ..TapeQuery::default()
    };
    let tenant = v.tenant.clone();
    let recordings = tokio::task::spawn_blocking(move || archive.recordings(&tenant, &query))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let mut proved = 0;
    for rec in recordings.iter().filter(|r| r.tier == Tier::Js) {
        let (result, divergence) = on_tape(
            &prepared,
            parts.host.clone(),
            Arc::new(cv.clone()),
            &rec.request,
            rec.tape.clone(),
        )
        .await;
        if result
            .as_ref()
            .err()
            .and_then(|e| e.compiled_left_at())
            .is_some()
        {
            continue;
        }
        if let Some(how) = differs(&rec.outcome, &result, divergence) {
            pin(Some(recorder.archive().index().clone()), v, &rec.id).await;
            return Err(format!(
                "its compiled code answered tape {} otherwise than the isolate did (the tape \
                 is kept: `hearth replay {}` replays it):\n{how}",
                rec.id, rec.id
            ));
        }
        proved += 1;
    }
    if proved == 0 {
        return Err(format!(
            "none of its {} newest tapes was answered by the compiled code, so nothing proves it",
            recordings.len()
        ));
    }
    Ok((prepared, proved))
}

/// Keeps tape `id` of `v`'s function past retention: it showed the
/// compiled code wrong, and the reason `v` is not compiled names it.
async fn pin(index: Option<Arc<dyn TapeIndex>>, v: &FunctionVersion, id: &str) {
    // A node that records nothing has no tape to keep.
    let Some(index) = index else { return };
    let pin = TapePin {
        tenant: v.tenant.clone(),
        function: v.name.clone(),
        id: id.to_string(),
    };
    let pinned = tokio::task::spawn_blocking(move || index.pin_tape(&pin)).await;
    if let Err(e) = pinned
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
    {
        tracing::warn!(tenant = v.tenant, function = v.name, id, error = %e, "could not keep a diverging tape");
    }
}

/// Runs `request` in an instance of its own of `prepared` (a version of
/// `version`), every host call answered from `tape` and none reaching the
/// world: what it answered, and where its calls parted from the tape's.
async fn on_tape(
    prepared: &Arc<dyn Prepared>,
    services: Arc<HostServices>,
    version: Arc<FunctionVersion>,
    request: &Request,
    tape: Tape,
) -> (Result<Response, InvokeError>, Option<Divergence>) {
    let meta = InvocationMeta {
        id: InvocationId::new(),
        started: Instant::now(),
        deadline: Instant::now() + Duration::from_millis(version.spec.limits.timeout_ms),
        trace: None,
        cpu: None,
        answer: None,
        version,
    };
    let host = HostCtx::replaying(services, meta, tape);
    let result = match prepared.instantiate_isolated().await {
        Ok(mut sandbox) => {
            let result = sandbox.invoke(request, host.clone()).await;
            host.settle().await;
            result
        }
        Err(e) => Err(e),
    };
    (result, host.divergence())
}

/// How a run on a tape differs from what the tape's invocation answered:
/// another outcome, or other host calls.
fn differs(
    recorded: &Outcome,
    result: &Result<Response, InvokeError>,
    divergence: Option<Divergence>,
) -> Option<String> {
    outcome_diff(recorded, &Outcome::of(result))
        .or_else(|| divergence.map(|d| format!("its host calls {d}")))
}

/// Where compiled code left, as a sentence for the function's log.
pub(crate) fn left_line(plan: &Plan, at: u32) -> String {
    format!(
        "compiled code left for the isolate: {}",
        plan.where_left(at)
    )
}

#[cfg(test)]
mod tests {
    // Tests unwrap: a failed unwrap is the test failing, at its line.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use hearth_core::FunctionSpec;
    use hearth_host::HostLimits;
    use hearth_store::{SqliteStore, Store};

    const PRIMES: &str = include_str!("../../../../examples/js/primes.mjs");

    /// What a version whose prepared code went holds is dropped (it warms
    /// up again); why a version is not compiled is kept.
    #[test]
    fn idle_versions_are_swept_but_refusals_are_kept() {
        let jit = Jit::new(JitConfig::default(), CompiledChecks::default());
        let version = |n: u32| FunctionVersion {
            tenant: "t".into(),
            name: "f".into(),
            version: n,
            artifact: String::new(),
            spec: hearth_core::FunctionSpec::new(Runtime::Js),
            created_at_ms: 0,
        };
        let warming = Phase::Warming {
            runs: 3,
            busy: Duration::ZERO,
        };
        jit.phases
            .lock()
            .entry(&version(1), || Slot::new(warming, Instant::now()));
        jit.phases.lock().entry(&version(2), || {
            Slot::new(Phase::Off("refused".into()), Instant::now())
        });
        assert_eq!(jit.sweep(|_, _, _| true), 0, "every version is prepared");
        assert_eq!(jit.sweep(|t, f, v| (t, f, v) != ("t", "f", 1)), 1);
        assert!(jit.phases.lock().get(&version(1)).is_none());
        assert_eq!(
            jit.mode(&version(2)),
            CompiledMode::NotCompiled(Some("refused".into()))
        );
    }

    /// Waits until `n` checks have run and the slot is free again.
    async fn checked(jit: &Jit, checks: &CompiledChecks, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while checks.checked.get() < n {
            assert!(Instant::now() < deadline, "the check never ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The slot is given back as the task ends, after counting.
        while jit.checking.lock().0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A live check in the real isolate: an answer the isolate gives too
    /// leaves the version compiled; one it gives otherwise (as compiled
    /// code with a bug would) drops it, naming the invocation, and the
    /// next check waits `check_idle` times as long as this one took. And
    /// leaving for the isolate too often drops a version too.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_live_answer_the_isolate_gives_otherwise_or_leaving_too_often_drops_the_compiled_version()
     {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(dir.path().join("db")).unwrap();
        let store: Arc<dyn Store> = Arc::new(sqlite.clone());
        let services = Arc::new(HostServices::new(store, HostLimits::default()));
        let pins: Arc<dyn TapeIndex> = Arc::new(sqlite.clone());
        let artifacts = Arc::new(ArtifactStore::open(dir.path().join("artifacts")).unwrap());
        let js: Arc<dyn Engine> = Arc::new(
            hearth_js::JsEngine::new(hearth_js::JsConfig::new(dir.path().join("cache"))).unwrap(),
        );
        let spec = FunctionSpec::new(Runtime::Js);
        let source = Source {
            file_name: Some("index.mjs".into()),
            ..Source::from(PRIMES.as_bytes().to_vec())
        };
        let compiled = js.compile(&spec, source).await.unwrap();
        let v = Arc::new(FunctionVersion {
            tenant: "t".into(),
            name: "primes".into(),
            version: 1,
            artifact: artifacts.put(&compiled.artifact).unwrap(),
            spec,
            created_at_ms: 0,
        });
        let code: Arc<dyn hearth_host::Artifacts> = artifacts.clone();
        let isolate = js.prepare(&v, &code).await.unwrap();

        let checks = CompiledChecks::default();
        let jit = Arc::new(Jit::new(
            JitConfig {
                check_idle: 0,
                ..JitConfig::default()
            },
            checks.clone(),
        ));
        let serving = Serving {
            plan: Arc::new(Plan::new(PRIMES).unwrap()),
            prepared: isolate.clone(),
            proved: 1,
            window: Mutex::new((0, 0)),
        };
        jit.phases.lock().entry(&v, || {
            Slot::new(Phase::Serving(Arc::new(serving)), Instant::now())
        });
        let request = Request {
            method: "POST".into(),
            path: "/".into(),
            body: "100".into(),
            ..Request::default()
        };
        // What the isolate answers, as correct compiled code would: 25
        // primes up to 100, summing to 1060.
        let (right, _) = on_tape(
            &isolate,
            services.clone(),
            v.clone(),
            &request,
            Tape::default(),
        )
        .await;
        let right = right.unwrap();
        assert_eq!(right.body, "25 1060");
        let check = |body: &'static str| {
            let slot = jit.check_slot().expect("no check runs");
            assert!(jit.check_slot().is_none(), "one check at a time");
            let id = InvocationId::new();
            let answered = Answered {
                id,
                request: request.clone(),
                tape: Tape::default(),
                outcome: Outcome::Response(Response {
                    body: body.into(),
                    ..right.clone()
                }),
            };
            jit.check(
                slot,
                &v,
                isolate.clone(),
                services.clone(),
                Some(pins.clone()),
                answered,
            );
            id
        };
        check("25 1060");
        checked(&jit, &checks, 1).await;
        assert_eq!(checks.diverged.get(), 0);
        assert_eq!(jit.mode(&v), CompiledMode::Compiled { proved: 1 });

        let id = check("26 1060");
        checked(&jit, &checks, 2).await;
        assert_eq!(checks.diverged.get(), 1);
        let CompiledMode::NotCompiled(Some(why)) = jit.mode(&v) else {
            panic!("still compiled: {:?}", jit.mode(&v));
        };
        assert!(why.contains(&id.to_string()), "{why}");
        assert!(why.contains("26 1060") && why.contains("25 1060"), "{why}");
        // The tape that diverged is kept past retention.
        assert_eq!(
            sqlite.tape_pins().unwrap(),
            vec![TapePin {
                tenant: "t".into(),
                function: "primes".into(),
                id: id.to_string(),
            }]
        );

        // With idle time, the next check waits.
        let idle = Arc::new(Jit::new(JitConfig::default(), CompiledChecks::default()));
        let slot = idle.check_slot().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(slot);
        assert!(idle.check_slot().is_none(), "checked again at once");

        // Leaving: 49 of a window of 100 keep the version compiled (the
        // window then starts over); 50 of the next drop it.
        let v2 = FunctionVersion {
            version: 2,
            ..(*v).clone()
        };
        let serving = Arc::new(Serving {
            plan: Arc::new(Plan::new(PRIMES).unwrap()),
            prepared: isolate.clone(),
            proved: 1,
            window: Mutex::new((0, 0)),
        });
        let s = serving.clone();
        jit.phases
            .lock()
            .entry(&v2, || Slot::new(Phase::Serving(s), Instant::now()));
        for k in 0..WINDOW {
            jit.compiled_ran(&v2, &serving, k < 49);
        }
        assert_eq!(jit.mode(&v2), CompiledMode::Compiled { proved: 1 });
        for _ in 0..49 {
            jit.compiled_ran(&v2, &serving, true);
        }
        assert_eq!(jit.mode(&v2), CompiledMode::Compiled { proved: 1 });
        jit.compiled_ran(&v2, &serving, true);
        let CompiledMode::NotCompiled(Some(why)) = jit.mode(&v2) else {
            panic!("still compiled after 50 leaves: {:?}", jit.mode(&v2));
        };
        assert!(why.contains("50 of 50"), "{why}");
    }
}
