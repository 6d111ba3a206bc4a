//! The host bridge: `__hearth`, the native functions the prelude calls
//! (text codecs, host clocks and randomness, logs, module lookup) and the
//! asynchronous host calls (KV, outbound HTTP) run on the node's runtime.

use std::rc::Rc;

use hearth_core::LogStream;
use hearth_host::{HostCtx, OutboundRequest};
use rquickjs::function::Opt;
use rquickjs::{Ctx, Exception, Function, IntoJs, Object, TypedArray, Value};
use serde_json::json;

use super::State;
use super::modules::resolve;
use crate::compile::Kind;

/// Bytes handed to JS as a Uint8Array.
struct Bytes(Vec<u8>);

impl<'js> IntoJs<'js> for Bytes {
    fn into_js(self, ctx: &Ctx<'js>) -> rquickjs::Result<Value<'js>> {
        TypedArray::<u8>::new(ctx.clone(), self.0).map(TypedArray::into_value)
    }
}

/// CommonJS bytecode, handed to JS as the wrapper function it evaluates to.
struct Script(Vec<u8>);

impl<'js> IntoJs<'js> for Script {
    fn into_js(self, ctx: &Ctx<'js>) -> rquickjs::Result<Value<'js>> {
        // SAFETY: bytecode from `compile`, checksummed on disk.
        unsafe { crate::compile::load_cjs(ctx, &self.0) }
    }
}

fn bytes_of(a: &TypedArray<'_, u8>) -> Vec<u8> {
    // SAFETY: copied at once; no JS runs meanwhile.
    unsafe { a.as_bytes() }.unwrap_or_default().to_vec()
}

pub(super) fn install_bridge(ctx: &Ctx<'_>, state: &Rc<State>) -> rquickjs::Result<()> {
    let h = Object::new(ctx.clone())?;
    h.set(
        "encode",
        Function::new(ctx.clone(), |s: String| Bytes(s.into_bytes()))?,
    )?;
    h.set(
        "decode",
        Function::new(ctx.clone(), |a: TypedArray<u8>| {
            String::from_utf8_lossy(&bytes_of(&a)).into_owned()
        })?,
    )?;
    h.set(
        "isUtf8",
        Function::new(ctx.clone(), |a: TypedArray<u8>| {
            std::str::from_utf8(&bytes_of(&a)).is_ok()
        })?,
    )?;
    let s = state.clone();
    h.set(
        "now",
        Function::new(ctx.clone(), move || match s.host() {
            Some(h) => (h.wall_clock_nanos() / 1_000_000) as f64,
            None => 0.0,
        })?,
    )?;
    let s = state.clone();
    h.set(
        "monotonic",
        Function::new(ctx.clone(), move || match s.host() {
            Some(h) => h.monotonic_nanos() as f64 / 1e6,
            None => 0.0,
        })?,
    )?;
    // The event loop's own clock for timer deadlines: not a host call, so
    // not taped — how often the loop looks at it depends on scheduling, and
    // a tape must only hold what the function's code asked for.
    h.set(
        "clock",
        Function::new(ctx.clone(), || {
            static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            ORIGIN
                .get_or_init(std::time::Instant::now)
                .elapsed()
                .as_secs_f64()
                * 1e3
        })?,
    )?;
    let s = state.clone();
    h.set(
        "random",
        Function::new(ctx.clone(), move |n: usize| {
            let mut buf = vec![0u8; n.min(65536)];
            if let Some(h) = s.host() {
                h.fill_random(&mut buf);
            }
            Bytes(buf)
        })?,
    )?;
    let s = state.clone();
    h.set(
        "log",
        Function::new(
            ctx.clone(),
            move |stream: String, level: String, text: String| {
                if let Some(h) = s.host() {
                    let stream = if stream == "stderr" {
                        LogStream::Stderr
                    } else {
                        LogStream::Log
                    };
                    h.log(stream, &level, &text);
                }
            },
        )?,
    )?;
    let s = state.clone();
    h.set(
        "unsupported",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx, what: String| -> rquickjs::Result<()> {
                s.flag_unsupported(&what);
                Err(Exception::throw_message(
                    &ctx,
                    &format!("{what} is not available in the js tier"),
                ))
            },
        )?,
    )?;
    let s = state.clone();
    h.set(
        "resolve",
        Function::new(ctx.clone(), move |ctx: Ctx, from: String, name: String| {
            resolve(&s, &from, &name).map_err(|e| Exception::throw_message(&ctx, &e.to_string()))
        })?,
    )?;
    let s = state.clone();
    h.set(
        "source",
        Function::new(ctx.clone(), move |path: String| {
            Bytes(
                s.code()
                    .units
                    .get(&path)
                    .map(|u| u.bytes.clone())
                    .unwrap_or_default(),
            )
        })?,
    )?;
    let s = state.clone();
    h.set(
        "cjs",
        Function::new(ctx.clone(), move |ctx: Ctx, path: String| {
            match s.code().units.get(&path) {
                Some(u) if u.kind == Kind::Cjs => Ok(Script(u.bytes.clone())),
                Some(_) => Err(Exception::throw_type(
                    &ctx,
                    &format!("{path} is an ES module; use import"),
                )),
                None => Err(Exception::throw_message(
                    &ctx,
                    &format!("cannot find module {path}"),
                )),
            }
        })?,
    )?;
    let s = state.clone();
    h.set(
        "call",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx,
                  op: String,
                  args: String,
                  body: Opt<TypedArray<u8>>|
                  -> rquickjs::Result<f64> {
                let Some(host) = s.host() else {
                    return Err(Exception::throw_message(&ctx, "no invocation is running"));
                };
                let id = s.next_call.get();
                s.next_call.set(id + 1);
                if op == "body_read" {
                    // Not a host call: the request itself, taped as it passes.
                    let body = s.request_body.borrow().clone();
                    let task = s.io.spawn(async move { (id, read_body(body).await) });
                    s.calls.borrow_mut().push(task);
                    return Ok(id as f64);
                }
                let body = body.0.as_ref().map(bytes_of).unwrap_or_default();
                let args: serde_json::Value = serde_json::from_str(&args).unwrap_or_default();
                // Running from now, not from when the task starts: the
                // invocation must not end in between (an unawaited call).
                let running = host.begin_call().ok();
                let task = s.io.spawn(async move {
                    let _running = running;
                    (id, host_call(&host, &op, args, body).await)
                });
                s.calls.borrow_mut().push(task);
                Ok(id as f64)
            },
        )?,
    )?;
    super::url::install(ctx, &h)?;
    ctx.globals().set("__hearth", h)?;
    Ok(())
}

/// The next chunk of a streamed request body: `{"done": false}` and the
/// chunk, or `{"done": true}` at its end.
async fn read_body(body: Option<super::RequestBody>) -> Result<(String, Vec<u8>), String> {
    let done = || Ok((json!({"done": true}).to_string(), Vec::new()));
    let Some(body) = body else {
        return done();
    };
    let mut body = body.lock().await;
    let Some(stream) = body.as_mut() else {
        return done();
    };
    match futures::StreamExt::next(stream).await {
        Some(Ok(chunk)) => Ok((json!({"done": false}).to_string(), chunk.to_vec())),
        None => {
            *body = None;
            done()
        }
        Some(Err(e)) => {
            *body = None;
            Err(format!("the request body did not arrive whole: {e}"))
        }
    }
}

fn unhex(v: &serde_json::Value) -> Vec<u8> {
    let s = v.as_str().unwrap_or_default();
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).ok())
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One host call, as the prelude's `call(op, args, body)` asks for it.
async fn host_call(
    host: &HostCtx,
    op: &str,
    args: serde_json::Value,
    body: Vec<u8>,
) -> Result<(String, Vec<u8>), String> {
    let err = |e: hearth_host::HostError| e.to_string();
    match op {
        "kv_get" => match host.kv_get(unhex(&args["key"])).await.map_err(err)? {
            Some(v) => Ok((json!({"found": true}).to_string(), v)),
            None => Ok((json!({"found": false}).to_string(), Vec::new())),
        },
        "kv_set" => {
            host.kv_set(unhex(&args["key"]), body).await.map_err(err)?;
            Ok(("{}".into(), Vec::new()))
        }
        "kv_delete" => {
            let existed = host.kv_delete(unhex(&args["key"])).await.map_err(err)?;
            Ok((json!({"existed": existed}).to_string(), Vec::new()))
        }
        "kv_list" => {
            let keys = host.kv_list(unhex(&args["prefix"])).await.map_err(err)?;
            let keys: Vec<String> = keys.iter().map(|k| hex(k)).collect();
            Ok((json!({"keys": keys}).to_string(), Vec::new()))
        }
        "http_fetch" => {
            let headers: Vec<(String, String)> =
                serde_json::from_value(args["headers"].clone()).unwrap_or_default();
            let request = OutboundRequest {
                method: args["method"].as_str().unwrap_or("GET").to_string(),
                url: args["url"].as_str().unwrap_or_default().to_string(),
                headers,
                body,
            };
            let r = host.http_fetch(request).await.map_err(err)?;
            Ok((
                json!({"status": r.status, "headers": r.headers}).to_string(),
                r.body.to_vec(),
            ))
        }
        other => Err(format!("unknown host call {other}")),
    }
}
