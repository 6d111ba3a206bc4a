//! Prometheus metrics of one node.

use std::sync::{Arc, OnceLock};

use hearth_core::{ByMode, Tier};
use hearth_record::Recorder;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub tier: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabels {
    pub tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StartLabels {
    pub start: &'static str,
}

/// The compiled path's live checks (`node/jit.rs`), counted from its tasks.
#[derive(Clone, Default)]
pub(crate) struct CompiledChecks {
    pub(crate) checked: Counter,
    pub(crate) diverged: Counter,
}

/// Everything `/metrics` reports.
pub struct Metrics {
    /// Behind a lock so that a part made after the node (the API's body
    /// budget) can add a reading ([`Metrics::read_at_scrape`]).
    registry: parking_lot::Mutex<Registry>,
    pub invocations: Family<OutcomeLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    /// Invocations refused at admission, by kind: not in the others.
    refused: Family<ErrorLabels, Counter>,
    /// Versions prepared (cold starts begun), by tier.
    prepares: Family<TierLabels, Counter>,
    pub starts: Family<StartLabels, Counter>,
    pub duration: Family<StartLabels, Histogram>,
    pub live_sandboxes: Gauge,
    pub deploys: Counter,
    pub logs_dropped: Counter,
    /// Compiled js invocations that left for the isolate.
    compiled_left: Counter,
    /// Live compiled answers re-checked in the isolate, and those that
    /// differed.
    pub(crate) compiled_checks: CompiledChecks,
    /// JavaScript invocations re-run in the process tier: per function
    /// when the operator opted into per-function series, else node-wide.
    fallbacks: Fallbacks,
    /// Each function's calls and latency, when opted into.
    per_function: Option<PerFunction>,
    /// The recorder whose handed-over tapes are `hearth_tapes_total`.
    recorder: Arc<OnceLock<Arc<Recorder>>>,
    /// Tapes the recorder had no room for, or failed to write.
    pub tapes_dropped: Counter,
    /// Handles to the series every invocation updates, looked up once:
    /// a family lookup (hash, lock) per update was measurable on `hello`.
    hot: Hot,
}

/// The per-invocation series, by index rather than by label lookup.
struct Hot {
    /// `[tier][ok, error]`
    invocations: [[Counter; 2]; 4],
    /// `[cold, warm]`
    starts: [Counter; 2],
    duration: [Histogram; 2],
}

const TIERS: [Tier; 4] = [Tier::Wasm, Tier::Js, Tier::Process, Tier::Compiled];
const STARTS: [&str; 2] = ["cold", "warm"];

impl Hot {
    fn new(
        invocations: &Family<OutcomeLabels, Counter>,
        starts: &Family<StartLabels, Counter>,
        duration: &Family<StartLabels, Histogram>,
    ) -> Hot {
        let start = |i: usize| StartLabels { start: STARTS[i] };
        Hot {
            invocations: TIERS.map(|tier| {
                ["ok", "error"].map(|outcome| {
                    invocations
                        .get_or_create(&OutcomeLabels {
                            tier: tier.as_str(),
                            outcome,
                        })
                        .clone()
                })
            }),
            starts: [0, 1].map(|i| starts.get_or_create(&start(i)).clone()),
            duration: [0, 1].map(|i| duration.get_or_create(&start(i)).clone()),
        }
    }
}

/// `hearth_js_fallbacks_total` and, per function only, `hearth_js_pinned`.
enum Fallbacks {
    NodeWide(Counter),
    PerFunction {
        count: Family<FunctionLabels, Counter>,
        /// 1 for each function pinned to the process tier by its fallbacks.
        pinned: Family<FunctionLabels, Gauge>,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FunctionLabels {
    pub tenant: String,
    pub function: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FunctionOutcomeLabels {
    pub tenant: String,
    pub function: String,
    pub outcome: &'static str,
}

/// With `--metrics-per-function`: each function's calls by outcome and
/// their latency.
struct PerFunction {
    invocations: Family<FunctionOutcomeLabels, Counter>,
    duration: Family<FunctionLabels, Histogram>,
}

fn labels(tenant: &str, function: &str) -> FunctionLabels {
    FunctionLabels {
        tenant: tenant.to_string(),
        function: function.to_string(),
    }
}

fn latency_histogram() -> Histogram {
    // 50 µs … ~26 s, doubling.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        50e-6, 2.0, 20,
    ))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(false)
    }
}

impl Metrics {
    /// With `per_function`, series that name tenants and functions are
    /// kept too. They are opt-in: they grow with the functions deployed, and
    /// say which tenants and functions exist to whoever reads `/metrics`.
    pub fn new(per_function: bool) -> Self {
        let mut registry = Registry::with_prefix("hearth");
        let invocations = Family::<OutcomeLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let refused = Family::<ErrorLabels, Counter>::default();
        let prepares = Family::<TierLabels, Counter>::default();
        let starts = Family::<StartLabels, Counter>::default();
        let duration = Family::<StartLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let live_sandboxes = Gauge::default();
        let deploys = Counter::default();
        let logs_dropped = Counter::default();
        let compiled_left = Counter::default();
        registry.register(
            "js_compiled_left",
            "Compiled JavaScript invocations that met what their traces did not cover and ran in the isolate",
            compiled_left.clone(),
        );
        let compiled_checks = CompiledChecks::default();
        registry.register(
            "js_compiled_checked",
            "Live compiled JavaScript invocations re-run against their tapes in the isolate",
            compiled_checks.checked.clone(),
        );
        registry.register(
            "js_compiled_diverged",
            "Live compiled JavaScript invocations the isolate answered otherwise (each drops a compiled version)",
            compiled_checks.diverged.clone(),
        );
        const FALLBACKS: &str =
            "JavaScript invocations the isolate tier could not run, re-run in the process tier";
        let fallbacks = if per_function {
            let (count, pinned) = (Family::default(), Family::default());
            registry.register("js_fallbacks", FALLBACKS, Family::clone(&count));
            registry.register(
                "js_pinned",
                "1 for a JavaScript function pinned to the process tier after repeated fallbacks",
                Family::clone(&pinned),
            );
            Fallbacks::PerFunction { count, pinned }
        } else {
            let count = Counter::default();
            registry.register("js_fallbacks", FALLBACKS, count.clone());
            Fallbacks::NodeWide(count)
        };
        let per_function = per_function.then(|| {
            let functions = PerFunction {
                invocations: Family::default(),
                duration: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            };
            registry.register(
                "function_invocations",
                "Invocations by tenant, function and outcome (ok, or error: it failed or answered 5xx)",
                functions.invocations.clone(),
            );
            registry.register(
                "function_duration_seconds",
                "Invocation latency by tenant and function",
                functions.duration.clone(),
            );
            functions
        });
        registry.register(
            "invocations",
            "Invocations by tier and outcome",
            invocations.clone(),
        );
        registry.register(
            "invocation_errors",
            "Failed invocations by kind of failure",
            errors.clone(),
        );
        registry.register(
            "invocations_refused",
            "Invocations refused at admission, by kind, before anything ran (not counted as invocations, starts or errors)",
            refused.clone(),
        );
        registry.register(
            "prepares",
            "Versions prepared to run (installs, compiles, zygotes: a cold start's work), by tier",
            prepares.clone(),
        );
        registry.register(
            "starts",
            "Invocations by cold or warm start",
            starts.clone(),
        );
        registry.register(
            "invocation_duration_seconds",
            "Invocation latency inside the node, by cold or warm start",
            duration.clone(),
        );
        registry.register(
            "sandboxes_live",
            "Sandboxes that exist right now",
            live_sandboxes.clone(),
        );
        registry.register("deploys", "Function versions deployed", deploys.clone());
        // `hearth_build_info{version="…"} 1`: which build a node runs, for
        // a dashboard to group or alert by (a rolling update half done).
        registry.register(
            "build",
            "The build of Hearth this member runs",
            prometheus_client::metrics::info::Info::new(vec![(
                "version",
                env!("CARGO_PKG_VERSION"),
            )]),
        );
        registry.register(
            "logs_dropped",
            "Log lines dropped because the writer fell behind",
            logs_dropped.clone(),
        );
        let recorder = Arc::<OnceLock<Arc<Recorder>>>::default();
        registry.register_collector(Box::new(TapesHanded(recorder.clone())));
        let tapes_dropped = Counter::default();
        registry.register(
            "tapes_dropped",
            "Tapes lost because the recorder fell behind or failed to write",
            tapes_dropped.clone(),
        );
        Metrics {
            hot: Hot::new(&invocations, &starts, &duration),
            registry: parking_lot::Mutex::new(registry),
            recorder,
            tapes_dropped,
            invocations,
            errors,
            refused,
            prepares,
            starts,
            duration,
            live_sandboxes,
            deploys,
            logs_dropped,
            compiled_left,
            compiled_checks,
            fallbacks,
            per_function,
        }
    }

    /// Counts one compiled invocation that left for the isolate.
    pub fn compiled_left(&self) {
        self.compiled_left.inc();
    }

    /// Counts one JavaScript invocation of `tenant/function` re-run in the
    /// process tier.
    pub fn fallback(&self, tenant: &str, function: &str) {
        match &self.fallbacks {
            Fallbacks::NodeWide(c) => {
                c.inc();
            }
            Fallbacks::PerFunction { count, .. } => {
                count.get_or_create(&labels(tenant, function)).inc();
            }
        }
    }

    /// Whether `tenant/function` is pinned to the process tier now.
    pub fn pinned(&self, tenant: &str, function: &str, pinned: bool) {
        if let Fallbacks::PerFunction { pinned: family, .. } = &self.fallbacks {
            if pinned {
                family.get_or_create(&labels(tenant, function)).set(1);
            } else {
                family.remove(&labels(tenant, function));
            }
        }
    }

    /// Counts one invocation refused at admission, of `kind`.
    pub fn refused(&self, kind: &'static str) {
        self.refused.get_or_create(&ErrorLabels { kind }).inc();
    }

    /// Counts one version prepared in `tier`.
    pub fn prepared(&self, tier: Tier) {
        self.prepares
            .get_or_create(&TierLabels {
                tier: tier.as_str(),
            })
            .inc();
    }

    /// Counts one finished invocation: its tier, outcome, start and time.
    pub fn invocation(&self, tier: Tier, ok: bool, cold: bool, seconds: f64) {
        let t = TIERS.iter().position(|&x| x == tier).unwrap_or(0);
        self.hot.invocations[t][usize::from(!ok)].inc();
        let s = usize::from(!cold);
        self.hot.starts[s].inc();
        self.hot.duration[s].observe(seconds);
    }

    /// Counts one finished invocation of `tenant/function` in its own
    /// series, when the operator opted into them; `ok` is false for a
    /// failure and for a 5xx the function answered (as its charts count).
    pub fn function_invocation(&self, tenant: &str, function: &str, ok: bool, seconds: f64) {
        let Some(f) = &self.per_function else {
            return;
        };
        f.invocations
            .get_or_create(&FunctionOutcomeLabels {
                tenant: tenant.to_string(),
                function: function.to_string(),
                outcome: if ok { "ok" } else { "error" },
            })
            .inc();
        f.duration
            .get_or_create(&labels(tenant, function))
            .observe(seconds);
    }

    /// Drops a removed function's own series.
    pub fn forget_function(&self, tenant: &str, function: &str) {
        if let Some(f) = &self.per_function {
            for outcome in ["ok", "error"] {
                f.invocations.remove(&FunctionOutcomeLabels {
                    tenant: tenant.to_string(),
                    function: function.to_string(),
                    outcome,
                });
            }
            f.duration.remove(&labels(tenant, function));
        }
        self.pinned(tenant, function, false);
    }

    /// Invocations finished here since start, by mode, ok or not: what
    /// `hearth_invocations_total` counts, summed over outcomes.
    pub fn invocations_by_mode(&self) -> ByMode {
        let mut by = ByMode::default();
        for (tier, outcomes) in TIERS.iter().zip(&self.hot.invocations) {
            *by.of(*tier) += outcomes.iter().map(Counter::get).sum::<u64>();
        }
        by
    }

    /// Counts `recorder`'s tapes as `hearth_tapes_total` (a node has one
    /// recorder; a second is ignored).
    pub fn count_tapes_of(&self, recorder: Arc<Recorder>) {
        let _ = self.recorder.set(recorder);
    }

    /// A gauge `hearth_{name}` whose value `read` gives at each scrape:
    /// for figures kept elsewhere (an atomic the hot path already updates),
    /// so that measuring them costs the hot path nothing.
    pub fn read_at_scrape(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.registry.lock().register_collector(Box::new(Reading {
            name,
            help,
            read: Box::new(read),
        }));
    }

    /// A gauge family `hearth_{name}` by tenant and function whose values
    /// `read` gives at each scrape, if the operator opted into series that
    /// name functions (`--metrics-per-function`); whether it did.
    pub fn read_per_function_at_scrape(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> Vec<((String, String), i64)> + Send + Sync + 'static,
    ) -> bool {
        if self.per_function.is_none() {
            return false;
        }
        self.registry
            .lock()
            .register_collector(Box::new(PerFunctionReading {
                name,
                help,
                read: Box::new(read),
            }));
        true
    }

    /// Every metric in the OpenMetrics text format (what Prometheus asks
    /// for first).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock())
            .expect("writing to a String cannot fail");
        out
    }

    /// Every metric in Prometheus' text format 0.0.4, for scrapers that
    /// ask for `text/plain`.
    pub fn encode_prometheus(&self) -> String {
        openmetrics_to_prometheus(&self.encode())
    }
}

/// OpenMetrics text as Prometheus' 0.0.4 text format, which
/// `prometheus-client` does not write: the two differ only in how they
/// name families and which lines they have. A counter family `x` (samples
/// `x_total`) is typed and described as `x_total`; an info family `x`
/// (sample `x_info`) becomes a gauge `x_info`; `# UNIT`, `# EOF` and the
/// `_created` samples go. Everything else is the same line.
fn openmetrics_to_prometheus(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The families' types, from their TYPE lines (which come first).
    let mut kinds = std::collections::HashMap::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
        {
            kinds.insert(name, kind);
        }
    }
    let renamed = |name: &str| match kinds.get(name).copied() {
        Some("counter") => format!("{name}_total"),
        Some("info") => format!("{name}_info"),
        _ => name.to_string(),
    };
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
        {
            let kind = match kind {
                "info" => "gauge",
                "unknown" => "untyped",
                other => other,
            };
            out.push_str(&format!("# TYPE {} {kind}\n", renamed(name)));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ")
            && let Some((name, help)) = rest.split_once(' ')
        {
            out.push_str(&format!("# HELP {} {help}\n", renamed(name)));
            continue;
        }
        let metric = line.split(['{', ' ']).next().unwrap_or_default();
        if let Some(family) = metric.strip_suffix("_created")
            && matches!(kinds.get(family).copied(), Some("counter" | "histogram"))
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `hearth_tapes_total`, the recorder's own count read at each scrape. A
/// counter bumped per invocation would be one more cache line that every
/// worker writes on every request (see `hearth_record`'s `Shards`).
struct TapesHanded(Arc<OnceLock<Arc<Recorder>>>);

impl std::fmt::Debug for TapesHanded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TapesHanded")
    }
}

impl Collector for TapesHanded {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let n = self.0.get().map_or(0, |r| r.handed());
        let counter = ConstCounter::new(n);
        let metric = encoder.encode_descriptor(
            "tapes",
            "Invocations whose tape was handed to the recorder",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric)?;
        let damaged = self
            .0
            .get()
            .map_or(0, |r| r.archive().damaged_blocks() as u64);
        let gauge = prometheus_client::metrics::gauge::ConstGauge::new(damaged as i64);
        let metric = encoder.encode_descriptor(
            "tape_blocks_damaged",
            "Blocks of tapes found damaged on disk since start (their tapes are lost)",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

/// A gauge read at each scrape ([`Metrics::read_at_scrape`]).
struct Reading {
    name: &'static str,
    help: &'static str,
    read: Box<dyn Fn() -> i64 + Send + Sync>,
}

impl std::fmt::Debug for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Collector for Reading {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = prometheus_client::metrics::gauge::ConstGauge::new((self.read)());
        let metric = encoder.encode_descriptor(self.name, self.help, None, gauge.metric_type())?;
        gauge.encode(metric)
    }
}

/// A gauge family by tenant and function, read at each scrape.
struct PerFunctionReading {
    name: &'static str,
    help: &'static str,
    #[allow(clippy::type_complexity)]
    read: Box<dyn Fn() -> Vec<((String, String), i64)> + Send + Sync>,
}

impl std::fmt::Debug for PerFunctionReading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Collector for PerFunctionReading {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            self.name,
            self.help,
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for ((tenant, function), value) in (self.read)() {
            let labels = FunctionLabels { tenant, function };
            let gauge = prometheus_client::metrics::gauge::ConstGauge::new(value);
            gauge.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn openmetrics_becomes_prometheus_text_family_by_family() {
        let om = "# HELP hearth_deploys Deploys.\n# TYPE hearth_deploys counter\n\
                  hearth_deploys_total 3\nhearth_deploys_created 1.7e9\n\
                  # HELP hearth_build The build.\n# TYPE hearth_build info\n\
                  hearth_build_info{version=\"0.1.0\"} 1\n\
                  # HELP hearth_live Live.\n# TYPE hearth_live gauge\n# UNIT hearth_live bytes\n\
                  hearth_live 2\n# EOF\n";
        assert_eq!(
            openmetrics_to_prometheus(om),
            "# HELP hearth_deploys_total Deploys.\n# TYPE hearth_deploys_total counter\n\
             hearth_deploys_total 3\n\
             # HELP hearth_build_info The build.\n# TYPE hearth_build_info gauge\n\
             hearth_build_info{version=\"0.1.0\"} 1\n\
             # HELP hearth_live Live.\n# TYPE hearth_live gauge\nhearth_live 2\n"
        );
    }

    use super::*;

    /// The counts by mode are the exposition's, per tier, ok and errors
    /// summed; the js tier is the isolate.
    #[test]
    fn invocations_by_mode_sum_each_tiers_outcomes() {
        let m = Metrics::new(false);
        for (tier, ok) in [
            (Tier::Js, true),
            (Tier::Js, false),
            (Tier::Wasm, true),
            (Tier::Process, false),
            (Tier::Js, true),
        ] {
            m.invocation(tier, ok, false, 0.001);
        }
        let by = m.invocations_by_mode();
        assert_eq!(
            by,
            ByMode {
                wasm: 1,
                isolate: 3,
                compiled: 0,
                process: 1
            }
        );
        let text = m.encode();
        assert!(
            text.contains(r#"hearth_invocations_total{tier="js",outcome="error"} 1"#),
            "{text}"
        );
    }
}
