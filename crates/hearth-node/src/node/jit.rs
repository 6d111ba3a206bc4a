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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_core::{FunctionVersion, InvocationId, Runtime, Tier};
use hearth_host::{Engine, HostCtx, HostServices, InvocationMeta, Prepared, Source};
use hearth_jit::{Plan, Trace};
use hearth_record::{Outcome, Recorder};
use hearth_store::{ArtifactStore, TapeQuery};
use parking_lot::Mutex;

/// When a js function is compiled, and how it is proved.
#[derive(Debug, Clone)]
pub struct JitConfig {
    /// Invocations in the isolate after which a version is judged.
    pub hot_after: u32,
    /// Mean time per invocation in the isolate, over those, at or above
    /// which it is compiled (I/O-bound functions stay interpreted).
    pub hot_mean: Duration,
    /// Traced invocations whose traces are merged before compiling.
    pub trace_runs: u32,
    /// The version's newest tapes the module is replayed against.
    pub proof_tapes: u32,
    /// Compiled invocations of which, when this many of the last
    /// [`WINDOW`] left for the isolate, the compiled path is dropped.
    pub max_left: u32,
}

impl Default for JitConfig {
    fn default() -> Self {
        JitConfig {
            hot_after: 20,
            hot_mean: Duration::from_millis(1),
            trace_runs: 10,
            proof_tapes: 50,
            max_left: 50,
        }
    }
}

/// Compiled invocations over which leaving is counted.
const WINDOW: u32 = 100;

/// A version's phase and when it was found hot.
type Slot = (Phase, Instant);

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
}

pub(crate) struct Jit {
    config: JitConfig,
    phases: Mutex<Phases>,
}

impl Jit {
    pub(crate) fn new(config: JitConfig) -> Jit {
        Jit {
            config,
            phases: Mutex::new(Phases::default()),
        }
    }

    /// How `v`'s next invocation runs.
    pub(crate) fn route(&self, v: &FunctionVersion) -> Route {
        match self.phases.lock().get(v) {
            Some((Phase::Tracing { traced, .. }, _)) => Route::Traced(traced.clone()),
            Some((Phase::Serving(s), _)) => Route::Compiled(s.clone()),
            _ => Route::Isolate,
        }
    }

    pub(crate) fn mode(&self, v: &FunctionVersion) -> CompiledMode {
        match self.phases.lock().get(v) {
            Some((Phase::Tracing { .. }, _)) => CompiledMode::Tracing,
            Some((Phase::Serving(s), _)) => CompiledMode::Compiled { proved: s.proved },
            Some((Phase::Off(why), _)) => CompiledMode::NotCompiled(Some(why.clone())),
            _ => CompiledMode::NotCompiled(None),
        }
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
        let (phase, _) = phases.entry(v, || {
            (
                Phase::Warming {
                    runs: 0,
                    busy: Duration::ZERO,
                },
                Instant::now(),
            )
        });
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
        let Some((phase, hot_at)) = phases.get_mut(v) else {
            return;
        };
        let Phase::Tracing { trace, .. } = phase else {
            return;
        };
        for line in lines {
            trace.merge_line(line);
        }
        if trace.runs < self.config.trace_runs {
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
        let (jit, v) = (self.clone(), v.clone());
        tokio::spawn(async move {
            let next =
                match compile_and_prove(&v, &plan, &trace, &parts, jit.config.proof_tapes).await {
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

    /// Stops serving `v` compiled, for good (until it is redeployed).
    pub(crate) fn demote(&self, v: &FunctionVersion, why: String) {
        tracing::warn!(
            tenant = v.tenant,
            function = v.name,
            version = v.version,
            why,
            "compiled js dropped"
        );
        if let Some((phase, _)) = self.phases.lock().get_mut(v) {
            *phase = Phase::Off(why);
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
            *slot = (next, hot_at);
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
        ..v.clone()
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
    tapes: u32,
) -> Result<(Arc<dyn Prepared>, usize), String> {
    let wasm = plan.compile(trace).map_err(|r| r.to_string())?;
    let mut spec = v.spec.clone();
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
    let archive = recorder.archive().clone();
    let query = TapeQuery {
        function: Some(v.name.clone()),
        version: Some(v.version),
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
        let meta = InvocationMeta {
            id: InvocationId::new(),
            version: Arc::new(cv.clone()),
            deadline: Instant::now() + Duration::from_millis(cv.spec.limits.timeout_ms),
        };
        let host = HostCtx::replaying(parts.host.clone(), meta, rec.tape.clone());
        let mut sandbox = prepared
            .instantiate_isolated()
            .await
            .map_err(|e| e.to_string())?;
        let result = sandbox.invoke(&rec.request, host.clone()).await;
        host.settle().await;
        if result
            .as_ref()
            .err()
            .and_then(|e| e.compiled_left_at())
            .is_some()
        {
            continue;
        }
        let replayed = Outcome::of(&result);
        if let Some(diff) = hearth_record::diff::outcome_diff(&rec.outcome, &replayed) {
            return Err(format!(
                "its compiled code answered tape {} otherwise than the isolate did:\n{diff}",
                rec.id
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

/// Where compiled code left, as a sentence for the function's log.
pub(crate) fn left_line(plan: &Plan, at: u32) -> String {
    format!(
        "compiled code left for the isolate: {}",
        plan.where_left(at)
    )
}
