//! The `hearth` import module: KV, outbound HTTP and logs for Wasm guests.
//!
//! Buffers follow one rule (see `examples/wasm/hearth.h`): the guest passes
//! `buf, cap, len_out`; the host writes at most `cap` bytes to `buf` and
//! always stores the full length in `*len_out`, so a guest can tell a
//! truncated answer and ask again with more room. Return values are `>= 0`
//! on success and a negative [`HostError::code`] otherwise. A pointer
//! outside the guest's memory traps: it is a bug, not a condition.

use hearth_core::LogStream;
use hearth_host::{HostCtx, HostError, OutboundRequest};
use wasmtime::{Caller, Extern, Linker, Memory};
use wasmtime::{bail, format_err};

use crate::sandbox::SandboxState;

type C<'a> = Caller<'a, SandboxState>;

fn memory(caller: &mut C<'_>) -> wasmtime::Result<Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => bail!("the hearth imports need the module to export its memory as `memory`"),
    }
}

fn host(caller: &C<'_>) -> wasmtime::Result<HostCtx> {
    caller.data().host.clone().ok_or_else(outside_invocation)
}

/// The trap for a host call made with no invocation to answer it.
pub(crate) fn outside_invocation() -> wasmtime::Error {
    format_err!(
        "a host call (randomness, KV, HTTP or logs) was made outside an invocation: \
         start functions and init steps cannot make them"
    )
}

fn read(caller: &mut C<'_>, ptr: u32, len: u32) -> wasmtime::Result<Vec<u8>> {
    let mem = memory(caller)?;
    let start = ptr as usize;
    let end = start
        .checked_add(len as usize)
        .ok_or_else(|| format_err!("guest buffer wraps around"))?;
    mem.data(&caller)
        .get(start..end)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| format_err!("guest buffer {ptr:#x}+{len} is outside its memory"))
}

fn read_str(caller: &mut C<'_>, ptr: u32, len: u32) -> wasmtime::Result<Result<String, HostError>> {
    let bytes = read(caller, ptr, len)?;
    Ok(String::from_utf8(bytes)
        .map_err(|_| HostError::Invalid("string argument is not UTF-8".into())))
}

/// Writes `bytes` into the guest's `buf[..cap]` and the full length to `len_out`.
fn write_out(
    caller: &mut C<'_>,
    buf: u32,
    cap: u32,
    len_out: u32,
    bytes: &[u8],
) -> wasmtime::Result<()> {
    let mem = memory(caller)?;
    let n = bytes.len().min(cap as usize);
    mem.write(&mut *caller, buf as usize, &bytes[..n])
        .map_err(|_| format_err!("guest buffer {buf:#x}+{n} is outside its memory"))?;
    let full = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    mem.write(&mut *caller, len_out as usize, &full.to_le_bytes())
        .map_err(|_| format_err!("guest length pointer {len_out:#x} is outside its memory"))?;
    Ok(())
}

fn level_name(level: i32) -> &'static str {
    match level {
        i32::MIN..=0 => "debug",
        1 => "info",
        2 => "warn",
        _ => "error",
    }
}

/// `hearth.leave(at)`: compiled JavaScript (`hearth-jit`) met what its
/// trace did not cover. It unwinds the guest like a trap; the sandbox
/// answers [`InvokeError::left_compiled`](hearth_core::InvokeError::left_compiled),
/// which the node takes as its cue to run the invocation in the isolate.
/// A module of a wasm function that calls it fails with 500
/// `unsupported`, as any trap would fail it.
#[derive(Debug)]
pub(crate) struct Left(pub u32);

impl std::fmt::Display for Left {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "compiled code left at {}", self.0)
    }
}

impl std::error::Error for Left {}

pub(crate) fn add_to_linker(linker: &mut Linker<SandboxState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "hearth",
        "leave",
        |_: C<'_>, at: u32| -> wasmtime::Result<()> { Err(wasmtime::Error::new(Left(at))) },
    )?;
    linker.func_wrap(
        "hearth",
        "log",
        |mut caller: C<'_>, level: i32, ptr: u32, len: u32| {
            let bytes = read(&mut caller, ptr, len)?;
            let host = host(&caller)?;
            host.log(
                LogStream::Log,
                level_name(level),
                &String::from_utf8_lossy(&bytes),
            );
            Ok(())
        },
    )?;

    linker.func_wrap_async(
        "hearth",
        "kv_get",
        |mut caller: C<'_>, (kp, kl, buf, cap, len_out): (u32, u32, u32, u32, u32)| {
            Box::new(async move {
                let key = read(&mut caller, kp, kl)?;
                let host = host(&caller)?;
                match host.kv_get(key).await {
                    Ok(Some(value)) => {
                        write_out(&mut caller, buf, cap, len_out, &value).map(|()| 0)
                    }
                    Ok(None) => Ok(1),
                    Err(e) => Ok(e.code()),
                }
            })
        },
    )?;

    linker.func_wrap_async(
        "hearth",
        "kv_set",
        |mut caller: C<'_>, (kp, kl, vp, vl): (u32, u32, u32, u32)| {
            Box::new(async move {
                let key = read(&mut caller, kp, kl)?;
                let value = read(&mut caller, vp, vl)?;
                let host = host(&caller)?;
                Ok(host
                    .kv_set(key, value)
                    .await
                    .map_or_else(|e| e.code(), |()| 0))
            })
        },
    )?;

    linker.func_wrap_async(
        "hearth",
        "kv_delete",
        |mut caller: C<'_>, (kp, kl): (u32, u32)| {
            Box::new(async move {
                let key = read(&mut caller, kp, kl)?;
                let host = host(&caller)?;
                Ok(match host.kv_delete(key).await {
                    Ok(true) => 0,
                    Ok(false) => 1,
                    Err(e) => e.code(),
                })
            })
        },
    )?;

    linker.func_wrap_async(
        "hearth",
        "kv_list",
        |mut caller: C<'_>, (pp, pl, buf, cap, len_out): (u32, u32, u32, u32, u32)| {
            Box::new(async move {
                let prefix = read(&mut caller, pp, pl)?;
                let host = host(&caller)?;
                match host.kv_list(prefix).await {
                    Ok(keys) => {
                        let mut packed = Vec::new();
                        for k in &keys {
                            packed.extend_from_slice(&(k.len() as u32).to_le_bytes());
                            packed.extend_from_slice(k);
                        }
                        write_out(&mut caller, buf, cap, len_out, &packed)?;
                        Ok(keys.len() as i32)
                    }
                    Err(e) => Ok(e.code()),
                }
            })
        },
    )?;

    // `new URL(text).href`, by the WHATWG URL Standard as the `url`
    // crate (the isolate's `URL`) has it: 0 with the href in `buf`, 1
    // for text that is no URL. A pure function of its argument, so not
    // taped: compiled JavaScript sends `fetch` the URL the isolate would.
    linker.func_wrap(
        "hearth",
        "url_href",
        |mut caller: C<'_>, tp: u32, tl: u32, buf: u32, cap: u32, len_out: u32| {
            let text = read(&mut caller, tp, tl)?;
            let Some(url) = std::str::from_utf8(&text)
                .ok()
                .and_then(|t| url::Url::parse(t).ok())
            else {
                return Ok(1);
            };
            write_out(&mut caller, buf, cap, len_out, url.as_str().as_bytes()).map(|()| 0)
        },
    )?;

    linker.func_wrap_async(
        "hearth",
        "http_fetch",
        |mut caller: C<'_>,
         (mp, ml, up, ul, hp, hl, bp, bl, buf, cap, len_out): (
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
        )| {
            Box::new(async move {
                let method = read_str(&mut caller, mp, ml)?;
                let url = read_str(&mut caller, up, ul)?;
                let headers = read_str(&mut caller, hp, hl)?;
                let body = read(&mut caller, bp, bl)?;
                let host = host(&caller)?;
                let request = match (method, url, headers) {
                    (Ok(method), Ok(url), Ok(headers)) => OutboundRequest {
                        method: if method.is_empty() {
                            "GET".into()
                        } else {
                            method
                        },
                        url,
                        headers: parse_header_lines(&headers),
                        body,
                    },
                    (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Ok(e.code()),
                };
                match host.http_fetch(request).await {
                    Ok(resp) => {
                        write_out(&mut caller, buf, cap, len_out, &resp.body)?;
                        Ok(i32::from(resp.status))
                    }
                    Err(e) => {
                        host.log(
                            LogStream::System,
                            "warn",
                            &format!("hearth.http_fetch: {e}"),
                        );
                        Ok(e.code())
                    }
                }
            })
        },
    )?;
    Ok(())
}

/// `Name: value` lines, separated by `\n` (a trailing `\r` is ignored).
fn parse_header_lines(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}
