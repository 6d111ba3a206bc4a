//! The settings a deploy takes in its query string: one table, which both
//! the parser and `/v1/openapi.json` read, so the documentation cannot
//! leave out what the API accepts (a unit test holds the parser to every
//! entry).

use hearth_core::{FunctionSpec, Runtime};
use serde_json::Value;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{ObjectBuilder, Type};

use crate::ApiError;

/// One deploy setting, as documented.
pub(crate) struct Setting {
    pub name: &'static str,
    /// The OpenAPI schema type of its value.
    pub kind: Type,
    pub doc: &'static str,
    /// A value it accepts: the document's example, and what the test that
    /// holds the parser to the table sends.
    pub example: &'static str,
}

pub(crate) const SETTINGS: &[Setting] = &[
    Setting {
        name: "runtime",
        kind: Type::String,
        doc: "wasm, js, python or node",
        example: "python",
    },
    Setting {
        name: "file_name",
        kind: Type::String,
        doc: "the upload's file name; infers the runtime when none is given",
        example: "handler.py",
    },
    Setting {
        name: "memory_mib",
        kind: Type::Integer,
        doc: "memory limit",
        example: "128",
    },
    Setting {
        name: "timeout_ms",
        kind: Type::Integer,
        doc: "time limit of one invocation",
        example: "5000",
    },
    Setting {
        name: "allow_host",
        kind: Type::String,
        doc: "repeatable; host or host:port the function may reach; loopback, private and link-local hosts are refused unless the node allows private egress",
        example: "api.example.com",
    },
    Setting {
        name: "env",
        kind: Type::String,
        doc: "repeatable; NAME=VALUE",
        example: "GREETING=hi",
    },
    Setting {
        name: "secret",
        kind: Type::String,
        doc: "repeatable; NAME binds the tenant's secret NAME as the environment variable NAME, VAR=NAME as VAR (`PUT /v1/secrets/{name}` sets one); the value is read when the version is prepared, never kept with the version",
        example: "DB_PASSWORD",
    },
    Setting {
        name: "promote",
        kind: Type::Boolean,
        doc: "point the `live` alias at the new version (default true); with false it is kept and invocable as name@N until promoted (`POST /v1/functions/{name}/aliases/live`)",
        example: "false",
    },
    Setting {
        name: "public",
        kind: Type::Boolean,
        doc: "invocable without a token",
        example: "true",
    },
    Setting {
        name: "handler",
        kind: Type::String,
        doc: "Python, Node.js, JavaScript: the function to call, as module.function (Lambda's handler setting: lambda_function.lambda_handler, src/index.handler); default: the entry file's handler, main or lambda_handler. A function named main gets OpenWhisk's params, any other Lambda's (event, context)",
        example: "app.handler",
    },
    Setting {
        name: "source_builds",
        kind: Type::Boolean,
        doc: "Python: let pip build packages without a wheel from source (their build runs in the install sandbox); default false: wheels only",
        example: "false",
    },
    Setting {
        name: "stream",
        kind: Type::Boolean,
        doc: "wasm modules, js and node functions: the request body streams to the function as it arrives (a module's stdin, a js Request's body) and the response to the caller as the function writes it (a module's stdout, a js Response made from a ReadableStream, a Lambda streaming handler's responseStream), chunked and up to the node's --max-stream-bytes, instead of both being whole; components always stream; refused for python",
        example: "true",
    },
    Setting {
        name: "schedule",
        kind: Type::String,
        doc: "repeatable; fire the function's live alias on a schedule: five cron fields (`*/5 * * * *`), optionally after `TZ=<IANA zone> `, a nickname (`@hourly`, `@daily`, …) or `@every 30s`; given, they replace the function's schedules (`none`: remove them all), each kept one keeping its pause and next tick; not given, the function keeps its schedules (docs/events.md)",
        example: "*/5 * * * *",
    },
    Setting {
        name: "trigger",
        kind: Type::String,
        doc: "repeatable; invoke the function's live alias for each message of a NATS JetStream stream: `nats://HOST:PORT/STREAM?subject=…&batch=…&attempts=…&dlq=…&credentials=…&deliver=all|new`, on a broker the operator allows (`--broker-allow`), checked and its consumer made before anything is deployed; given, they replace the function's bindings (`none`: remove them all), each kept one keeping its pause; not given, the function keeps its bindings (docs/events.md)",
        example: "nats://127.0.0.1:4222/ORDERS?subject=orders.>&dlq=orders.dead",
    },
    Setting {
        name: "schedule_catch_up",
        kind: Type::Integer,
        doc: "how many ticks a schedule missed while no member ran are fired late, 0 to 100 (default 0: skipped, and said in the function's log)",
        example: "3",
    },
    Setting {
        name: "record_sample",
        kind: Type::Number,
        doc: "share of invocations taped, 0 to 1 (default 1: all)",
        example: "0.25",
    },
    Setting {
        name: "keep_ok",
        kind: Type::String,
        doc: "how long tapes of successful invocations are kept (90s, 15m, 1h, 2d); default the node's",
        example: "1h",
    },
    Setting {
        name: "keep_errors",
        kind: Type::String,
        doc: "how long tapes of failed invocations are kept; default the node's",
        example: "2d",
    },
    Setting {
        name: "max_tape_bytes",
        kind: Type::Integer,
        doc: "host-call bytes one invocation's tape may hold; at most the node's budget",
        example: "65536",
    },
];

/// The deploy's query settings, for `#[utoipa::path(params(..))]`: the
/// parameters come from [`SETTINGS`], the table [`parse`] reads.
pub(crate) struct DeploySettings;

impl utoipa::IntoParams for DeploySettings {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        SETTINGS
            .iter()
            .map(|s| {
                // A number or boolean's example as one, anything else as text.
                let example = match s.kind {
                    Type::String => Value::from(s.example),
                    _ => serde_json::from_str(s.example).unwrap_or_else(|_| Value::from(s.example)),
                };
                ParameterBuilder::new()
                    .name(s.name)
                    .parameter_in(ParameterIn::Query)
                    .description(Some(s.doc))
                    .schema(Some(ObjectBuilder::new().schema_type(s.kind.clone())))
                    .example(Some(example))
                    .build()
            })
            .collect()
    }
}

/// Deploy settings from the query string (repeatable keys allowed): the
/// spec, the runtime if given or inferable, and the upload's file name.
/// A deploy's settings, as its query string gave them.
pub(crate) struct Parsed {
    pub spec: FunctionSpec,
    /// Given, or inferred from the file name.
    pub runtime: Option<Runtime>,
    pub file_name: Option<String>,
    /// Whether `live` moves to the new version.
    pub promote: bool,
    /// The function's schedules from now on, if the deploy says
    /// (`schedule=none`: none).
    pub schedules: Option<Vec<hearth_events::Schedule>>,
    pub catch_up: u32,
    /// The function's broker bindings from now on, if the deploy says
    /// (`trigger=none`: none).
    pub triggers: Option<Vec<hearth_events::Binding>>,
}

pub(crate) fn parse(query: &str) -> Result<Parsed, ApiError> {
    let mut spec = FunctionSpec::new(Runtime::Wasm);
    let mut runtime = None;
    let mut file_name = None;
    let mut promote = true;
    let mut schedules: Option<Vec<hearth_events::Schedule>> = None;
    let mut catch_up = 0;
    let mut triggers: Option<Vec<hearth_events::Binding>> = None;
    let bad = |k: &str, v: &str| ApiError::BadRequest(format!("invalid value {v:?} for {k}"));
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        // Only what is documented is taken: a setting handled below but
        // missing from SETTINGS is refused, so the two cannot drift.
        if !SETTINGS.iter().any(|s| s.name == k) {
            let known: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
            return Err(ApiError::BadRequest(format!(
                "unknown deploy setting {k:?}; known: {}",
                known.join(", ")
            )));
        }
        match &*k {
            "runtime" => {
                runtime = Some(
                    v.parse::<Runtime>()
                        .map_err(|e| ApiError::BadRequest(e.to_string()))?,
                )
            }
            "file_name" => file_name = Some(v.into_owned()),
            "memory_mib" => spec.limits.memory_mib = v.parse().map_err(|_| bad(&k, &v))?,
            "timeout_ms" => spec.limits.timeout_ms = v.parse().map_err(|_| bad(&k, &v))?,
            "allow_host" => spec.allowed_hosts.push(v.into_owned()),
            "public" => spec.public = v.parse().map_err(|_| bad(&k, &v))?,
            "promote" => promote = v.parse().map_err(|_| bad(&k, &v))?,
            "source_builds" => spec.source_builds = v.parse().map_err(|_| bad(&k, &v))?,
            "stream" => spec.stream = v.parse().map_err(|_| bad(&k, &v))?,
            "handler" => {
                spec.handler = Some(v.parse().map_err(|e: hearth_core::ValidationError| {
                    ApiError::BadRequest(e.to_string())
                })?)
            }
            "record_sample" => {
                let rate: f64 = v.parse().map_err(|_| bad(&k, &v))?;
                if !(0.0..=1.0).contains(&rate) {
                    return Err(bad(&k, &v));
                }
                spec.record.sample_ppm = (rate * 1e6).round() as u32;
            }
            "keep_ok" => {
                spec.record.keep_ok_s =
                    Some(hearth_core::parse_duration_s(&v).ok_or_else(|| bad(&k, &v))?)
            }
            "max_tape_bytes" => {
                spec.record.max_tape_bytes = Some(v.parse().map_err(|_| bad(&k, &v))?)
            }
            "keep_errors" => {
                spec.record.keep_errors_s =
                    Some(hearth_core::parse_duration_s(&v).ok_or_else(|| bad(&k, &v))?)
            }
            "secret" => {
                let (var, secret) = v.split_once('=').unwrap_or((&v, &v));
                for (kind, name) in [("environment variable", var), ("secret name", secret)] {
                    hearth_core::validate_env_name(kind, name)
                        .map_err(|e| ApiError::BadRequest(format!("secret={v:?}: {e}")))?;
                }
                if spec
                    .secrets
                    .insert(var.to_string(), secret.to_string())
                    .is_some()
                {
                    return Err(ApiError::BadRequest(format!(
                        "secret={v:?}: {var} is bound twice"
                    )));
                }
            }
            "schedule" => {
                let list = schedules.get_or_insert_with(Vec::new);
                if v.trim() != "none" {
                    let parsed: hearth_events::Schedule =
                        v.parse().map_err(|e: hearth_events::ScheduleError| {
                            ApiError::BadRequest(e.to_string())
                        })?;
                    if list.iter().any(|s| s.id() == parsed.id()) {
                        return Err(ApiError::BadRequest(format!(
                            "schedule {:?} is given twice",
                            parsed.expr()
                        )));
                    }
                    list.push(parsed);
                }
                if list.len() > hearth_store::MAX_SCHEDULES_PER_FUNCTION {
                    return Err(ApiError::BadRequest(format!(
                        "a function has at most {} schedules",
                        hearth_store::MAX_SCHEDULES_PER_FUNCTION
                    )));
                }
            }
            "trigger" => {
                let list = triggers.get_or_insert_with(Vec::new);
                if v.trim() != "none" {
                    let parsed = hearth_events::Binding::parse(v.trim())
                        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
                    if list.iter().any(|b| b.id() == parsed.id()) {
                        return Err(ApiError::BadRequest(format!(
                            "trigger {v:?} reads what another of the deploy's triggers reads: \
                             give each its own stream or subject"
                        )));
                    }
                    list.push(parsed);
                }
                if list.len() > hearth_store::MAX_TRIGGERS_PER_FUNCTION {
                    return Err(ApiError::BadRequest(format!(
                        "a function has at most {} broker bindings (trigger=)",
                        hearth_store::MAX_TRIGGERS_PER_FUNCTION
                    )));
                }
            }
            "schedule_catch_up" => {
                catch_up = v.parse().map_err(|_| bad(&k, &v))?;
                if catch_up > 100 {
                    return Err(ApiError::BadRequest(format!(
                        "schedule_catch_up is 0 to 100 ticks, not {catch_up}"
                    )));
                }
            }
            "env" => {
                let (name, value) = v.split_once('=').ok_or_else(|| {
                    ApiError::BadRequest(format!("env {v:?} should be NAME=VALUE"))
                })?;
                spec.env.insert(name.to_string(), value.to_string());
            }
            other => {
                return Err(ApiError::Internal(format!(
                    "deploy setting {other:?} is documented but not handled"
                )));
            }
        }
    }
    let inferred = file_name.as_deref().and_then(Runtime::infer_from_file_name);
    Ok(Parsed {
        spec,
        runtime: runtime.or(inferred),
        file_name,
        promote,
        schedules,
        catch_up,
        triggers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_setting_is_taken_and_nothing_else() {
        for s in SETTINGS {
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair(s.name, s.example)
                .finish();
            assert!(parse(&query).is_ok(), "{query} refused");
        }
        let Parsed {
            spec,
            runtime,
            promote,
            ..
        } = parse("runtime=node&record_sample=0.5&keep_ok=1h&keep_errors=2d&max_tape_bytes=10")
            .unwrap();
        assert_eq!(runtime, Some(Runtime::Node));
        assert!(
            promote,
            "a deploy makes its version live unless told not to"
        );
        assert!(!parse("promote=false").unwrap().promote);
        assert!(parse("promote=later").is_err());
        assert_eq!(spec.record.sample_ppm, 500_000);
        assert_eq!(spec.record.keep_ok_s, Some(3600));
        assert_eq!(spec.record.keep_errors_s, Some(2 * 86_400));
        assert_eq!(spec.record.max_tape_bytes, Some(10));
        let Err(ApiError::BadRequest(m)) = parse("memory=64") else {
            panic!("an unknown setting is a 400");
        };
        assert!(
            m.contains("memory_mib"),
            "the error lists what is known: {m}"
        );
        assert!(parse("record_sample=2").is_err());
        assert!(parse("keep_ok=forever").is_err());
    }
}
