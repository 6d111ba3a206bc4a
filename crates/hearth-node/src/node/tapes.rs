//! Tapes of a node's invocations: which invocations get one, handing each
//! to the recorder, and replaying one against a version (`docs/recording.md`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_core::{FunctionVersion, InvocationId, Request, Tier};
use hearth_host::{Divergence, HostCtx, InvocationMeta, Tape};
use hearth_record::{BodyDigest, Outcome, OutcomeRef, Recording, RecordingRef, Streamed};

use super::{InvokeOutcome, Node, NodeError};

/// What replaying one tape showed.
#[derive(Debug)]
pub struct ReplayReport {
    pub id: String,
    pub function: String,
    pub recorded_version: u32,
    pub replayed_version: u32,
    /// The code differs from the code the tape was made with.
    pub code_changed: bool,
    pub tier: Tier,
    /// Same host calls in the same order, and the same response.
    pub identical: bool,
    pub divergence: Option<Divergence>,
    pub recorded: Outcome,
    pub replayed: Outcome,
    /// `-` recorded, `+` replayed; `None` when the outcomes are equal.
    pub diff: Option<String>,
    /// What the replay logged (it is not added to the function's logs).
    pub logs: Vec<String>,
    pub duration: Duration,
}

impl Node {
    /// Whether this invocation of `v` gets a tape.
    pub(super) fn sampled(&self, v: &FunctionVersion) -> bool {
        use rand::Rng;
        let ppm = v.spec.record.sample_ppm;
        let sampled = self.recorder.is_some()
            && (ppm >= hearth_core::RecordPolicy::ALL || rand::rng().next_u32() % 1_000_000 < ppm);
        // On a full disk, a tape would only fail to be written.
        if sampled && self.disk.as_ref().is_some_and(|d| d.full()) {
            self.metrics.tapes_dropped.inc();
            return false;
        }
        sampled
    }

    /// Hands the finished invocation's tape to the recorder (in `sync`
    /// durability, waits until it is on disk). The recorder encodes it
    /// from where it is: names, request and response are not copied.
    pub(super) async fn record(
        &self,
        v: &FunctionVersion,
        tier: Tier,
        started_ms: Option<i64>,
        (request, streamed): (&Request, Option<&Streamed>),
        (outcome, tape): (InvokeOutcome, Tape),
    ) -> InvokeOutcome {
        let (Some(recorder), Some(started_ms)) = (&self.recorder, started_ms) else {
            return outcome;
        };
        let mut id = [0u8; 32];
        let id: &str = outcome.id.0.simple().encode_lower(&mut id);
        let message;
        let result = match &outcome.result {
            Ok(r) => OutcomeRef::Response(r),
            Err(e) => {
                message = e.to_string();
                OutcomeRef::Error {
                    kind: e.kind(),
                    status: e.http_status(),
                    message: &message,
                }
            }
        };
        let recording = RecordingRef {
            id,
            tenant: &v.tenant,
            function: &v.name,
            version: v.version,
            artifact: &v.artifact,
            tier,
            started_ms,
            duration_us: outcome.duration.as_micros() as u64,
            request,
            tape: &tape,
            outcome: result,
            streamed,
        };
        // The recorder counts what it takes (hearth_tapes_total); what
        // it does not is counted in hearth_tapes_dropped_total, and logged
        // once per thousand so an overloaded recorder does not flood the log.
        if let Err(e) = recorder.record(recording).await
            && self.metrics.tapes_dropped.inc().is_multiple_of(1000)
        {
            tracing::warn!(error = %e, id = %outcome.id, "an invocation's tape was not kept");
        }
        outcome
    }

    /// Runs `recording` again against `target` (the version that made it,
    /// or another), answering every host call from the tape; nothing the
    /// replay does reaches the world, the function's logs or the tapes.
    ///
    /// A replay runs the tenant's code as an invocation does, so it is
    /// admitted as one: refused ([`NodeError::Refused`]) before anything
    /// is prepared when the node or the tenant is at its limit (slots,
    /// memory), and holding a node permit and the tenant's share while it
    /// runs.
    pub async fn replay(
        &self,
        recording: &Recording,
        target: &Arc<FunctionVersion>,
    ) -> Result<ReplayReport, NodeError> {
        let runs_in =
            |t: Tier| target.spec.runtime.tiers().contains(&t) && self.engines.contains_key(&t);
        let tier = if runs_in(recording.tier) {
            recording.tier
        } else {
            self.tier_for(target).await?
        };
        let refused = |error| NodeError::Refused {
            id: InvocationId::new(),
            error,
        };
        let admissible = || self.would_admit(target).map_err(refused);
        let (prepared, _) = self.prepared(target, tier, admissible).await?;
        let streamed = recording.streamed.as_ref();
        if let Some(whole) = streamed.and_then(|s| s.cut_request(&recording.request.body)) {
            return Err(NodeError::Invalid(format!(
                "invocation {} streamed a request body of {} bytes, and its tape keeps the \
                 first {} and the whole body's hash: the request cannot be given to the \
                 function again",
                recording.id,
                whole.len,
                recording.request.body.len()
            )));
        }
        // Held until the replay ends.
        let room = self.room(target).map_err(refused)?;
        let started = Instant::now();
        let meta = InvocationMeta {
            id: InvocationId::new(),
            version: target.clone(),
            started,
            deadline: started + Duration::from_millis(target.spec.limits.timeout_ms),
            trace: None,
            cpu: Some(room.share.cpu()),
            answer: None,
        };
        let host = HostCtx::replaying(self.host.clone(), meta, recording.tape.clone());
        // In an instance of its own: a replay neither sees what live
        // traffic left in a warm instance nor leaves anything for it.
        let sandbox = prepared.instantiate_isolated().await;
        // A version that streams replays as it ran (a module's stdin and
        // CGI variables differ between the two paths), and a response that
        // streamed is compared as it was taped: its first bytes, its length
        // and its hash.
        let (result, response_digest) = match sandbox {
            Ok(sandbox) if prepared.streams() => {
                self.replay_streaming(sandbox, &recording.request, &host)
                    .await
            }
            Ok(sandbox) => (
                self.attempt_in(sandbox, &recording.request, &host).await,
                None,
            ),
            Err(e) => (Err(e), None),
        };
        let duration = started.elapsed();
        let divergence = host.divergence();
        let replayed = Outcome::of(&result);
        let mut diff = hearth_record::diff::outcome_diff(&recording.outcome, &replayed);
        let recorded_digest = streamed.and_then(|s| s.response);
        if diff.is_none() && recorded_digest != response_digest {
            let show = |d: Option<BodyDigest>| match d {
                Some(d) => format!("{} bytes, blake3 {}", d.len, hex::encode(d.blake3)),
                None => "not streamed".into(),
            };
            diff = Some(format!(
                "- response body: {}\n+ response body: {}\n",
                show(recorded_digest),
                show(response_digest)
            ));
        }
        let logs = host
            .take_records()
            .1
            .into_iter()
            .map(|l| l.message)
            .collect();
        Ok(ReplayReport {
            id: recording.id.clone(),
            function: recording.function.clone(),
            recorded_version: recording.version,
            replayed_version: target.version,
            code_changed: target.artifact != recording.artifact,
            tier,
            identical: divergence.is_none() && diff.is_none(),
            divergence,
            recorded: recording.outcome.clone(),
            replayed,
            diff,
            logs,
            duration,
        })
    }
}
