//! WASI preview 1 for WAGI commands, answered by Hearth itself.
//!
//! A Hearth Wasm function is a WASI command that reads its request from
//! stdin and the environment and writes its response to stdout. That is
//! all of WASI it is given: three standard streams, arguments, environment,
//! clocks, randomness, sleeping and exit. There are no preopened
//! directories and no sockets, so every filesystem and socket call answers
//! `EBADF`/`ENOTDIR`/`ENOTSOCK`/`ENOTSUP` the way a process with nothing
//! open would. WebAssembly/wasi-testsuite's preview-1 programs that apply
//! to such a WASI pass (`tests/wasi_testsuite.rs`).
//!
//! Why not `wasmtime-wasi`: its preview 1 layer is an adapter over WASI 0.2
//! (a resource table, boxed streams, clocks and RNGs per context, a tracing
//! span per call). For a module that writes one line, building and dropping
//! that context and going through its stream machinery was about a third
//! of the sandbox's cost per invocation (`bench/RESULTS.md` §2). Here a
//! context is four buffers, the environment is one block per request on top
//! of one shared per version, and `fd_write` is a bounds-checked copy.
//!
//! Every answer that is not a pure function of the request — wall and
//! monotonic clocks, random bytes — comes from the invocation's
//! [`HostCtx`], so it is on the tape and replays exactly. Outside an
//! invocation (a module's start function, a deploy's init step) clocks are
//! read directly and randomness traps.
//!
//! Guest memory is only touched through bounds-checked slices of the
//! instance's exported `memory`; a pointer outside it answers `EFAULT`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use hearth_host::{BodyStream, HostCtx};
use tokio::sync::mpsc;
use wasmtime::{Caller, Extern, Linker, format_err};

use crate::sandbox::SandboxState;

type C<'a> = Caller<'a, SandboxState>;

const MODULE: &str = "wasi_snapshot_preview1";

/// WASI preview 1 `errno` values this module answers with.
mod errno {
    pub const SUCCESS: i32 = 0;
    pub const BADF: i32 = 8;
    pub const FAULT: i32 = 21;
    pub const INVAL: i32 = 28;
    pub const IO: i32 = 29;
    pub const NOSYS: i32 = 52;
    pub const NOTDIR: i32 = 54;
    pub const NOTSOCK: i32 = 57;
    pub const NOTSUP: i32 = 58;
    pub const OVERFLOW: i32 = 61;
    pub const SPIPE: i32 = 70;
}

/// Scatter/gather lists longer than Linux's `IOV_MAX` are refused, so one
/// call cannot keep the host busy walking millions of empty buffers.
const MAX_IOVS: u32 = 1024;
/// Subscriptions one `poll_oneoff` may pass (same reason).
const MAX_SUBSCRIPTIONS: u32 = 1024;
/// Bytes one `random_get` may ask for; past it the guest traps.
pub(crate) const MAX_RANDOM: u32 = 1 << 20;

/// `proc_exit`: the guest ended itself with this status. It unwinds the
/// guest like a trap; the sandbox tells status 0 (success) from the rest.
#[derive(Debug)]
pub(crate) struct Exit(pub i32);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exited with status {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// NUL-terminated strings back to back, as `args_get` and `environ_get`
/// hand them to the guest.
#[derive(Debug, Default, Clone)]
pub(crate) struct Strings {
    bytes: Vec<u8>,
    count: u32,
}

impl Strings {
    pub fn with_capacity(bytes: usize) -> Self {
        Strings {
            bytes: Vec::with_capacity(bytes),
            count: 0,
        }
    }

    /// Appends `parts` joined into one string. A part holding a NUL
    /// would split the string in the guest's eyes, so callers validate
    /// (function env at deploy; HTTP header values cannot hold one).
    pub fn push(&mut self, parts: &[&[u8]]) {
        for p in parts {
            self.bytes.extend_from_slice(p);
        }
        self.bytes.push(0);
        self.count += 1;
    }

    /// `NAME=value`.
    pub fn push_var(&mut self, name: &str, value: &str) {
        self.push(&[name.as_bytes(), b"=", value.as_bytes()]);
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes.split(|&b| b == 0).take(self.count as usize)
    }
}

/// A standard output stream kept in memory, up to `cap` bytes.
#[derive(Debug, Default)]
pub(crate) struct Output {
    pub bytes: Vec<u8>,
    cap: usize,
    /// Bytes the guest wrote past `cap`.
    pub dropped: usize,
}

impl Output {
    pub fn new(cap: usize) -> Self {
        Output {
            bytes: Vec::new(),
            cap,
            dropped: 0,
        }
    }

    /// Keeps what fits; true if all of `data` did.
    fn write(&mut self, data: &[u8]) -> bool {
        let room = self.cap.saturating_sub(self.bytes.len());
        let n = data.len().min(room);
        self.bytes.extend_from_slice(&data[..n]);
        self.dropped += data.len() - n;
        n == data.len()
    }
}

/// One invocation's WASI state: what the guest reads and what it wrote.
#[derive(Debug, Default)]
pub(crate) struct WasiCtx {
    /// `argv`: the function's name.
    pub args: std::sync::Arc<Strings>,
    /// The version's variables (its own env and the fixed CGI ones),
    /// shared by every invocation, then this request's.
    pub env_version: std::sync::Arc<Strings>,
    pub env_request: Strings,
    pub stdin: Bytes,
    pub stdin_pos: usize,
    /// The response; a write past its cap stops the guest (see
    /// `stdout_overflowed`).
    pub stdout: Output,
    /// Goes to the function's log; past its cap writes are dropped, and
    /// the log says it was cut.
    pub stderr: Output,
    /// fds 0..=2 the guest closed.
    pub closed: [bool; 3],
    /// Set when the invocation streams: stdin's next chunks come from the
    /// caller as it sends them, stdout leaves in pieces as it fills.
    pub stream: Option<StdioStream>,
}

/// Bytes of stdout a streaming invocation gathers before they leave: the
/// first piece is also the window a CGI header block must fit in (as it
/// must when the output is buffered whole).
pub(crate) const STREAM_PIECE: usize = 64 << 10;

/// The standard streams of an invocation whose bodies stream.
pub(crate) struct StdioStream {
    /// The rest of the request body; `None` once it has ended.
    pub body: Option<BodyStream>,
    /// Where stdout's pieces go: each with whether it is the last.
    pub out: mpsc::Sender<(Bytes, bool)>,
    /// Whether a piece has gone (then so has the response's head).
    pub sent: bool,
}

impl std::fmt::Debug for StdioStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioStream")
            .field("body_ended", &self.body.is_none())
            .finish_non_exhaustive()
    }
}

/// Why a streaming guest's write to stdout fails: the response is gone
/// (the invocation's error says why: the caller left, or a limit).
const RESPONSE_GONE: &str = "the response stream was closed";

impl WasiCtx {
    /// Whether the guest tried to write more than the response may hold.
    pub fn stdout_overflowed(&self) -> bool {
        self.stdout.dropped > 0
    }

    fn open(&self, fd: u32) -> bool {
        fd < 3 && !self.closed[fd as usize]
    }
}

/// Guest memory as a byte slice, with WASI's little-endian accessors.
struct Guest<'a>(&'a mut [u8]);

impl Guest<'_> {
    fn slice(&self, ptr: u32, len: u32) -> Result<&[u8], i32> {
        let start = ptr as usize;
        self.0.get(start..start + len as usize).ok_or(errno::FAULT)
    }

    fn slice_mut(&mut self, ptr: u32, len: u32) -> Result<&mut [u8], i32> {
        let start = ptr as usize;
        self.0
            .get_mut(start..start + len as usize)
            .ok_or(errno::FAULT)
    }

    fn u32(&self, ptr: u32) -> Result<u32, i32> {
        let b = self.slice(ptr, 4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn put(&mut self, ptr: u32, bytes: &[u8]) -> Result<(), i32> {
        self.slice_mut(ptr, bytes.len() as u32)?
            .copy_from_slice(bytes);
        Ok(())
    }

    fn put_u32(&mut self, ptr: u32, v: u32) -> Result<(), i32> {
        self.put(ptr, &v.to_le_bytes())
    }

    fn put_u64(&mut self, ptr: u32, v: u64) -> Result<(), i32> {
        self.put(ptr, &v.to_le_bytes())
    }

    /// The `(buf, len)` pairs of an iovec array.
    fn iovecs(&self, iovs: u32, n: u32) -> Result<Vec<(u32, u32)>, i32> {
        if n > MAX_IOVS {
            return Err(errno::INVAL);
        }
        (0..n)
            .map(|i| {
                let at = iovs.checked_add(i * 8).ok_or(errno::FAULT)?;
                let len_at = at.checked_add(4).ok_or(errno::FAULT)?;
                Ok((self.u32(at)?, self.u32(len_at)?))
            })
            .collect()
    }

    /// Writes `list`'s pointer table at `ptrs` and its strings at `buf`.
    fn put_strings(&mut self, list: &[&Strings], ptrs: u32, buf: u32) -> Result<(), i32> {
        let (mut p, mut b) = (ptrs, buf);
        for strings in list {
            for s in strings.iter() {
                self.put_u32(p, b)?;
                let end = b.checked_add(s.len() as u32).ok_or(errno::FAULT)?;
                self.put(b, s)?;
                self.put(end, &[0])?;
                p = p.checked_add(4).ok_or(errno::FAULT)?;
                b = end.checked_add(1).ok_or(errno::FAULT)?;
            }
        }
        Ok(())
    }
}

/// The guest's memory and the store's state, together.
fn split<'a>(caller: &'a mut C<'_>) -> wasmtime::Result<(Guest<'a>, &'a mut SandboxState)> {
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return Err(format_err!(
            "WASI needs the module to export its memory as `memory`"
        ));
    };
    let (mem, state) = memory.data_and_store_mut(caller);
    Ok((Guest(mem), state))
}

/// Runs `f` on guest memory and state; an errno from it is the answer.
fn with<R: Into<i32>>(
    caller: &mut C<'_>,
    f: impl FnOnce(&mut Guest<'_>, &mut SandboxState) -> Result<R, i32>,
) -> wasmtime::Result<i32> {
    let (mut guest, state) = split(caller)?;
    Ok(f(&mut guest, state).map_or_else(|e| e, Into::into))
}

/// Wall-clock nanoseconds: the invocation's (taped) or, outside one, the
/// system's.
fn wall_nanos(host: Option<&HostCtx>) -> u64 {
    match host {
        Some(h) => h.wall_clock_nanos(),
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}

fn monotonic_nanos(host: Option<&HostCtx>) -> u64 {
    match host {
        Some(h) => h.monotonic_nanos(),
        None => hearth_host::monotonic_now_nanos(),
    }
}

const CLOCK_REALTIME: u32 = 0;
const CLOCK_MONOTONIC: u32 = 1;

/// Filetype `unknown`: what a pipe-like standard stream reports.
const FILETYPE_UNKNOWN: u8 = 0;
const RIGHT_FD_READ: u64 = 1 << 1;
const RIGHT_FD_WRITE: u64 = 1 << 6;
const RIGHT_POLL_FD_READWRITE: u64 = 1 << 27;

/// An answer for a call on `fd` that only makes sense for files: `EBADF`
/// if it is not open, else `errno` (stdio is not a file).
fn stdio_only(state: &SandboxState, fd: u32, errno: i32) -> i32 {
    if state.wasi.open(fd) {
        errno
    } else {
        errno::BADF
    }
}

/// Adds every WASI preview 1 function to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<SandboxState>) -> wasmtime::Result<()> {
    // ---- arguments and environment ----
    linker.func_wrap(
        MODULE,
        "args_sizes_get",
        |mut caller: C<'_>, count: u32, size: u32| {
            with(&mut caller, |g, s| {
                g.put_u32(count, s.wasi.args.count)?;
                g.put_u32(size, s.wasi.args.bytes.len() as u32)?;
                Ok(errno::SUCCESS)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "args_get",
        |mut caller: C<'_>, ptrs: u32, buf: u32| {
            with(&mut caller, |g, s| {
                g.put_strings(&[&s.wasi.args], ptrs, buf)?;
                Ok(errno::SUCCESS)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "environ_sizes_get",
        |mut caller: C<'_>, count: u32, size: u32| {
            with(&mut caller, |g, s| {
                let w = &s.wasi;
                g.put_u32(count, w.env_version.count + w.env_request.count)?;
                let bytes = w.env_version.bytes.len() + w.env_request.bytes.len();
                g.put_u32(size, u32::try_from(bytes).map_err(|_| errno::OVERFLOW)?)?;
                Ok(errno::SUCCESS)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "environ_get",
        |mut caller: C<'_>, ptrs: u32, buf: u32| {
            with(&mut caller, |g, s| {
                let w = &s.wasi;
                g.put_strings(&[&w.env_version, &w.env_request], ptrs, buf)?;
                Ok(errno::SUCCESS)
            })
        },
    )?;

    // ---- clocks and randomness (from the host, so taped) ----
    linker.func_wrap(
        MODULE,
        "clock_res_get",
        |mut caller: C<'_>, id: u32, out: u32| {
            with(&mut caller, |g, _| match id {
                CLOCK_REALTIME | CLOCK_MONOTONIC => g.put_u64(out, 1).map(|()| errno::SUCCESS),
                _ => Err(errno::BADF),
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "clock_time_get",
        |mut caller: C<'_>, id: u32, _precision: u64, out: u32| {
            with(&mut caller, |g, s| {
                let now = match id {
                    CLOCK_REALTIME => wall_nanos(s.host.as_ref()),
                    CLOCK_MONOTONIC => monotonic_nanos(s.host.as_ref()),
                    // Process and thread CPU clocks are not offered.
                    _ => return Err(errno::BADF),
                };
                g.put_u64(out, now).map(|()| errno::SUCCESS)
            })
        },
    )?;
    // One guest call is one host call with exactly the bytes the guest
    // receives, so the tape holds them once.
    linker.func_wrap(
        MODULE,
        "random_get",
        |mut caller: C<'_>, buf: u32, len: u32| -> wasmtime::Result<i32> {
            if len > MAX_RANDOM {
                return Err(format_err!(
                    "random_get of {len} bytes exceeds the limit of {MAX_RANDOM}"
                ));
            }
            let (mut g, s) = split(&mut caller)?;
            let Some(host) = s.host.as_ref() else {
                return Err(crate::imports::outside_invocation());
            };
            match g.slice_mut(buf, len) {
                Ok(dst) => {
                    host.fill_random(dst);
                    Ok(errno::SUCCESS)
                }
                Err(e) => Ok(e),
            }
        },
    )?;

    // ---- the standard streams ----
    linker.func_wrap_async(
        MODULE,
        "fd_write",
        |mut caller: C<'_>, (fd, iovs, n, nwritten): (u32, u32, u32, u32)| {
            Box::new(async move { fd_write(&mut caller, fd, iovs, n, nwritten).await })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "fd_read",
        |mut caller: C<'_>, (fd, iovs, n, nread): (u32, u32, u32, u32)| {
            Box::new(async move { fd_read(&mut caller, fd, iovs, n, nread).await })
        },
    )?;
    linker.func_wrap(MODULE, "fd_close", |mut caller: C<'_>, fd: u32| {
        with(&mut caller, |_, s| {
            if !s.wasi.open(fd) {
                return Err(errno::BADF);
            }
            s.wasi.closed[fd as usize] = true;
            Ok(errno::SUCCESS)
        })
    })?;
    linker.func_wrap(
        MODULE,
        "fd_fdstat_get",
        |mut caller: C<'_>, fd: u32, out: u32| {
            with(&mut caller, |g, s| {
                if !s.wasi.open(fd) {
                    return Err(errno::BADF);
                }
                let rights = RIGHT_POLL_FD_READWRITE
                    | if fd == 0 {
                        RIGHT_FD_READ
                    } else {
                        RIGHT_FD_WRITE
                    };
                // fdstat: filetype u8, flags u16 at 2, rights at 8 and 16.
                let mut stat = [0u8; 24];
                stat[0] = FILETYPE_UNKNOWN;
                stat[8..16].copy_from_slice(&rights.to_le_bytes());
                stat[16..24].copy_from_slice(&rights.to_le_bytes());
                g.put(out, &stat).map(|()| errno::SUCCESS)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_filestat_get",
        |mut caller: C<'_>, fd: u32, out: u32| {
            with(&mut caller, |g, s| {
                if !s.wasi.open(fd) {
                    return Err(errno::BADF);
                }
                // filestat: all zero but the filetype (at 16), also zero.
                g.put(out, &[0u8; 64]).map(|()| errno::SUCCESS)
            })
        },
    )?;
    // No preopened directories: the scan wasi-libc does at start ends at
    // the first `EBADF`.
    linker.func_wrap(MODULE, "fd_prestat_get", |_: C<'_>, _fd: u32, _out: u32| {
        errno::BADF
    })?;
    linker.func_wrap(
        MODULE,
        "fd_prestat_dir_name",
        |_: C<'_>, _fd: u32, _path: u32, _len: u32| errno::BADF,
    )?;

    // ---- calls for files, directories and sockets: there are none, so
    // they answer EBADF for a closed or unknown fd, and for stdio what
    // a pipe would (no seeking, no flags, not a directory) ----
    macro_rules! not_a_file {
        ($name:literal, $errno:expr, |$fd:ident $(, $arg:ident : $ty:ty)*|) => {
            linker.func_wrap(MODULE, $name, |mut caller: C<'_>, $fd: u32 $(, $arg: $ty)*| {
                $( let _ = $arg; )*
                with(&mut caller, |_, s| Err::<i32, _>(stdio_only(s, $fd, $errno)))
            })?;
        };
    }
    not_a_file!("fd_fdstat_set_flags", errno::NOTSUP, |fd, a: u32|);
    not_a_file!("fd_fdstat_set_rights", errno::NOTSUP, |fd, a: u64, b: u64|);
    not_a_file!("fd_seek", errno::SPIPE, |fd, a: i64, b: u32, c: u32|);
    not_a_file!("fd_tell", errno::SPIPE, |fd, a: u32|);
    not_a_file!("fd_advise", errno::SPIPE, |fd, a: u64, b: u64, c: u32|);
    not_a_file!("fd_allocate", errno::SPIPE, |fd, a: u64, b: u64|);
    not_a_file!("fd_datasync", errno::INVAL, |fd|);
    not_a_file!("fd_sync", errno::INVAL, |fd|);
    not_a_file!("fd_filestat_set_size", errno::INVAL, |fd, a: u64|);
    not_a_file!("fd_filestat_set_times", errno::INVAL, |fd, a: u64, b: u64, c: u32|);
    not_a_file!("fd_pread", errno::SPIPE, |fd, a: u32, b: u32, c: u64, d: u32|);
    not_a_file!("fd_pwrite", errno::SPIPE, |fd, a: u32, b: u32, c: u64, d: u32|);
    not_a_file!("fd_readdir", errno::NOTDIR, |fd, a: u32, b: u32, c: u64, d: u32|);
    not_a_file!("fd_renumber", errno::NOTSUP, |fd, a: u32|);
    not_a_file!("path_create_directory", errno::NOTDIR, |fd, a: u32, b: u32|);
    not_a_file!("path_filestat_get", errno::NOTDIR, |fd, a: u32, b: u32, c: u32, d: u32|);
    not_a_file!("path_filestat_set_times", errno::NOTDIR, |fd, a: u32, b: u32, c: u32, d: u64, e: u64, f: u32|);
    not_a_file!("path_link", errno::NOTDIR, |fd, a: u32, b: u32, c: u32, d: u32, e: u32, f: u32|);
    not_a_file!("path_open", errno::NOTDIR, |fd, a: u32, b: u32, c: u32, d: u32, e: u64, f: u64, g: u32, h: u32|);
    not_a_file!("path_readlink", errno::NOTDIR, |fd, a: u32, b: u32, c: u32, d: u32, e: u32|);
    not_a_file!("path_remove_directory", errno::NOTDIR, |fd, a: u32, b: u32|);
    not_a_file!("path_rename", errno::NOTDIR, |fd, a: u32, b: u32, c: u32, d: u32, e: u32|);
    not_a_file!("path_unlink_file", errno::NOTDIR, |fd, a: u32, b: u32|);
    linker.func_wrap(
        MODULE,
        "path_symlink",
        |mut caller: C<'_>, _old: u32, _old_len: u32, fd: u32, _new: u32, _new_len: u32| {
            with(&mut caller, |_, s| {
                Err::<i32, _>(stdio_only(s, fd, errno::NOTDIR))
            })
        },
    )?;
    not_a_file!("sock_accept", errno::NOTSOCK, |fd, a: u32, b: u32|);
    not_a_file!("sock_recv", errno::NOTSOCK, |fd, a: u32, b: u32, c: u32, d: u32, e: u32|);
    not_a_file!("sock_send", errno::NOTSOCK, |fd, a: u32, b: u32, c: u32, d: u32|);
    not_a_file!("sock_shutdown", errno::NOTSOCK, |fd, a: u32|);

    // ---- the process ----
    linker.func_wrap(
        MODULE,
        "proc_exit",
        |_: C<'_>, code: u32| -> wasmtime::Result<()> {
            Err(wasmtime::Error::new(Exit(code as i32)))
        },
    )?;
    linker.func_wrap(MODULE, "proc_raise", |_: C<'_>, _sig: u32| errno::NOSYS)?;
    // Epoch ticks already share the CPU (see `sandbox::new_store`).
    linker.func_wrap(MODULE, "sched_yield", |_: C<'_>| errno::SUCCESS)?;
    linker.func_wrap_async(
        MODULE,
        "poll_oneoff",
        |mut caller: C<'_>, (subs, events, n, nevents): (u32, u32, u32, u32)| {
            Box::new(async move { poll_oneoff(&mut caller, subs, events, n, nevents).await })
        },
    )?;
    Ok(())
}

/// `fd_write`: stderr and a buffered stdout are kept in memory; a
/// streaming stdout leaves in [`STREAM_PIECE`]s, each write waiting while
/// the caller has no room for the next piece.
async fn fd_write(
    caller: &mut C<'_>,
    fd: u32,
    iovs: u32,
    n: u32,
    nwritten: u32,
) -> wasmtime::Result<i32> {
    if fd != 1 || caller.data().wasi.stream.is_none() {
        return write_buffered(caller, fd, iovs, n, nwritten);
    }
    let list = {
        let (g, s) = split(caller)?;
        if !s.wasi.open(fd) {
            return Ok(errno::BADF);
        }
        match g.iovecs(iovs, n) {
            Ok(l) => l,
            Err(e) => return Ok(e),
        }
    };
    let mut total = 0u32;
    for (ptr, len) in list {
        let mut done = 0;
        loop {
            // At most a piece is held; a full one is sent (and the write
            // waits for room) before the rest is taken.
            let (g, s) = split(caller)?;
            let data = match g.slice(ptr, len) {
                Ok(d) => &d[done..],
                Err(e) => return Ok(e),
            };
            let stdout = &mut s.wasi.stdout.bytes;
            let k = data.len().min(STREAM_PIECE - stdout.len());
            stdout.extend_from_slice(&data[..k]);
            done += k;
            if stdout.len() == STREAM_PIECE {
                send_piece(&mut s.wasi).await?;
            }
            if done == len as usize {
                break;
            }
        }
        total = total.saturating_add(len);
    }
    let (mut g, _) = split(caller)?;
    Ok(g.put_u32(nwritten, total)
        .map_or_else(|e| e, |()| errno::SUCCESS))
}

/// `fd_write` to memory: stderr, or a stdout that is answered whole.
fn write_buffered(
    caller: &mut C<'_>,
    fd: u32,
    iovs: u32,
    n: u32,
    nwritten: u32,
) -> wasmtime::Result<i32> {
    let (mut g, s) = split(caller)?;
    if !s.wasi.open(fd) || fd == 0 {
        return Ok(errno::BADF);
    }
    let list = match g.iovecs(iovs, n) {
        Ok(l) => l,
        Err(e) => return Ok(e),
    };
    let out = if fd == 1 {
        &mut s.wasi.stdout
    } else {
        &mut s.wasi.stderr
    };
    let mut total = 0u32;
    for (ptr, len) in list {
        let data = match g.slice(ptr, len) {
            Ok(d) => d,
            Err(e) => return Ok(e),
        };
        // stderr past its cap is dropped (the log says it was cut); stdout
        // past its cap ends the invocation, which is then reported as a
        // response over the limit.
        if !out.write(data) && fd == 1 {
            return Err(format_err!("the response is larger than its limit"));
        }
        total = total.saturating_add(len);
    }
    Ok(g.put_u32(nwritten, total)
        .map_or_else(|e| e, |()| errno::SUCCESS))
}

/// Sends what a streaming stdout holds as the next piece, waiting until the
/// caller has room for it.
async fn send_piece(w: &mut WasiCtx) -> wasmtime::Result<()> {
    let piece = std::mem::replace(&mut w.stdout.bytes, Vec::with_capacity(STREAM_PIECE));
    let Some(stream) = &mut w.stream else {
        return Ok(());
    };
    stream.sent = true;
    if stream.out.send((piece.into(), false)).await.is_err() {
        return Err(format_err!(RESPONSE_GONE));
    }
    Ok(())
}

/// Before a streaming guest waits (for its request, or a clock), what it
/// has written so far leaves, so output written a line at a time (events,
/// progress) reaches the caller while the guest waits, not a piece later.
/// The first output waits until it shows whether it opens with a CGI
/// header block.
async fn flush_before_waiting(caller: &mut C<'_>) -> wasmtime::Result<()> {
    let w = &mut caller.data_mut().wasi;
    let Some(stream) = &w.stream else {
        return Ok(());
    };
    if w.stdout.bytes.is_empty() || !(stream.sent || crate::cgi::head_is_known(&w.stdout.bytes)) {
        return Ok(());
    }
    send_piece(w).await
}

/// `fd_read` on stdin: what is left of the request's current chunk; when
/// the request streams and that is used up, it waits for the next one.
async fn fd_read(
    caller: &mut C<'_>,
    fd: u32,
    iovs: u32,
    n: u32,
    nread: u32,
) -> wasmtime::Result<i32> {
    let w = &mut caller.data_mut().wasi;
    if !w.open(fd) || fd != 0 {
        return Ok(errno::BADF);
    }
    let must_wait =
        w.stdin_pos == w.stdin.len() && w.stream.as_ref().is_some_and(|s| s.body.is_some());
    if must_wait {
        flush_before_waiting(caller).await?;
    }
    let w = &mut caller.data_mut().wasi;
    if w.stdin_pos == w.stdin.len()
        && let Some(stream) = &mut w.stream
        && let Some(body) = &mut stream.body
    {
        match body.next().await {
            Some(Ok(chunk)) => {
                w.stdin = chunk;
                w.stdin_pos = 0;
            }
            // End of the request; or it broke off or passed its limit, and
            // the invocation fails with that whatever the guest does next.
            end => {
                stream.body = None;
                if end.is_some() {
                    return Ok(errno::IO);
                }
            }
        }
    }
    with(caller, |g, s| {
        let w = &mut s.wasi;
        let mut total = 0u32;
        for (ptr, len) in g.iovecs(iovs, n)? {
            let rest = &w.stdin[w.stdin_pos..];
            let k = rest.len().min(len as usize);
            g.put(ptr, &rest[..k])?;
            w.stdin_pos += k;
            total += k as u32;
            if k < len as usize {
                break;
            }
        }
        g.put_u32(nread, total).map(|()| errno::SUCCESS)
    })
}

/// What one subscription waits for.
enum Wait {
    /// Ready now: an event with this error and byte count.
    Ready { errno: i32, nbytes: u64 },
    /// A clock: ready after this long.
    After(Duration),
}

const EVENT_CLOCK: u8 = 0;
const SUBCLOCK_ABSTIME: u16 = 1;

/// `poll_oneoff`: standard streams are always ready (stdin is in memory,
/// stdout and stderr never block), so the call returns their events at
/// once; otherwise it sleeps until the earliest clock. Sleeping reads no
/// taped clock: the guest gets the same events on replay either way.
async fn poll_oneoff(
    caller: &mut C<'_>,
    subs: u32,
    events: u32,
    n: u32,
    nevents: u32,
) -> wasmtime::Result<i32> {
    if n == 0 || n > MAX_SUBSCRIPTIONS {
        return Ok(errno::INVAL);
    }
    // subscription: userdata u64, tag u8 at 8, then at 16 either a clock
    // (id u32, timeout u64 at 24, precision at 32, flags u16 at 40) or an
    // fd (u32).
    let mut waits = Vec::with_capacity(n as usize);
    {
        let (g, s) = split(caller)?;
        for i in 0..n {
            let at = match subs.checked_add(i * 48) {
                Some(at) => at,
                None => return Ok(errno::FAULT),
            };
            let sub = match g.slice(at, 48) {
                Ok(sub) => sub,
                Err(e) => return Ok(e),
            };
            let word = |o: usize| u64::from_le_bytes(sub[o..o + 8].try_into().expect("8 bytes"));
            let userdata = word(0);
            let tag = sub[8];
            let id = u32::from_le_bytes(sub[16..20].try_into().expect("4 bytes"));
            let wait = match tag {
                EVENT_CLOCK => {
                    let timeout = word(24);
                    let absolute = u16::from_le_bytes([sub[40], sub[41]]) & SUBCLOCK_ABSTIME != 0;
                    let now = || match id {
                        CLOCK_REALTIME => Some(wall_nanos(None)),
                        CLOCK_MONOTONIC => Some(hearth_host::monotonic_now_nanos()),
                        _ => None,
                    };
                    match (absolute, now()) {
                        (_, None) => Wait::Ready {
                            errno: errno::INVAL,
                            nbytes: 0,
                        },
                        (false, Some(_)) => Wait::After(Duration::from_nanos(timeout)),
                        (true, Some(now)) => {
                            Wait::After(Duration::from_nanos(timeout.saturating_sub(now)))
                        }
                    }
                }
                // fd_read (1) and fd_write (2)
                1 | 2 => {
                    let readable = tag == 1 && id == 0;
                    let writable = tag == 2 && (id == 1 || id == 2);
                    if s.wasi.open(id) && (readable || writable) {
                        let nbytes = if readable {
                            (s.wasi.stdin.len() - s.wasi.stdin_pos) as u64
                        } else {
                            u32::MAX as u64
                        };
                        Wait::Ready {
                            errno: errno::SUCCESS,
                            nbytes,
                        }
                    } else {
                        Wait::Ready {
                            errno: errno::BADF,
                            nbytes: 0,
                        }
                    }
                }
                _ => return Ok(errno::INVAL),
            };
            waits.push((userdata, tag, wait));
        }
    }
    let any_ready = waits
        .iter()
        .any(|(_, _, w)| matches!(w, Wait::Ready { .. }));
    let sleep = waits
        .iter()
        .filter_map(|(_, _, w)| match w {
            Wait::After(d) => Some(*d),
            Wait::Ready { .. } => None,
        })
        .min();
    let slept = match (any_ready, sleep) {
        (false, Some(d)) => {
            flush_before_waiting(caller).await?;
            // The sandbox's own deadline ends an over-long sleep.
            tokio::time::sleep(d).await;
            d
        }
        _ => Duration::ZERO,
    };
    // event: userdata u64, error u16 at 8, type u8 at 10, nbytes u64 at 16,
    // flags u16 at 24.
    let (mut g, _) = split(caller)?;
    let mut count = 0u32;
    for (userdata, tag, wait) in waits {
        let (err, nbytes) = match wait {
            Wait::Ready { errno, nbytes } => (errno, nbytes),
            Wait::After(d) if d <= slept => (errno::SUCCESS, 0),
            Wait::After(_) => continue,
        };
        let mut ev = [0u8; 32];
        ev[0..8].copy_from_slice(&userdata.to_le_bytes());
        ev[8..10].copy_from_slice(&(err as u16).to_le_bytes());
        ev[10] = tag;
        ev[16..24].copy_from_slice(&nbytes.to_le_bytes());
        let at = match events.checked_add(count * 32) {
            Some(at) => at,
            None => return Ok(errno::FAULT),
        };
        if let Err(e) = g.put(at, &ev) {
            return Ok(e);
        }
        count += 1;
    }
    Ok(g.put_u32(nevents, count)
        .map_or_else(|e| e, |()| errno::SUCCESS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_pack_nul_terminated() {
        let mut s = Strings::default();
        s.push_var("A", "1");
        s.push(&[b"x"]);
        assert_eq!(s.bytes, b"A=1\0x\0");
        assert_eq!(s.count, 2);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![&b"A=1"[..], b"x"]);
    }

    #[test]
    fn output_keeps_what_fits_and_counts_the_rest() {
        let mut o = Output::new(4);
        assert!(o.write(b"abc"));
        assert!(!o.write(b"def"));
        assert_eq!((o.bytes.as_slice(), o.dropped), (&b"abcd"[..], 2));
    }

    #[test]
    fn guest_pointers_outside_memory_are_faults_not_panics() {
        let mut mem = vec![0u8; 16];
        let mut g = Guest(&mut mem);
        assert_eq!(g.u32(12), Ok(0));
        assert_eq!(g.u32(13), Err(errno::FAULT));
        assert_eq!(g.u32(u32::MAX), Err(errno::FAULT));
        assert_eq!(g.put(15, b"ab"), Err(errno::FAULT));
        assert_eq!(g.iovecs(0, MAX_IOVS + 1), Err(errno::INVAL));
        assert_eq!(g.iovecs(8, 2), Err(errno::FAULT));
        let mut a = Strings::default();
        a.push(&[b"name"]);
        assert_eq!(
            g.put_strings(&[&a], 0, 12),
            Err(errno::FAULT),
            "string runs past the end"
        );
        assert_eq!(g.put_strings(&[&a], 0, 4), Ok(()));
        assert_eq!(&g.0[0..9], &[4, 0, 0, 0, b'n', b'a', b'm', b'e', 0]);
    }

    proptest::proptest! {
        /// Whatever pointers and lengths a guest passes, the accessors
        /// answer EFAULT (or EINVAL) and never panic; what they read or
        /// write lies inside its memory.
        #[test]
        fn no_pointer_makes_guest_memory_panic(
            len in 0usize..64,
            ptr in proptest::prop_oneof![0u32..80, (u32::MAX - 80)..=u32::MAX],
            n in proptest::prop_oneof![0u32..80, (u32::MAX - 80)..=u32::MAX],
            iovs in 0u32..=8,
        ) {
            let mut mem: Vec<u8> = (0..len as u8).collect();
            let mut g = Guest(&mut mem);
            if let Ok(b) = g.slice(ptr, n) {
                proptest::prop_assert!(ptr as usize + b.len() <= len);
            }
            let fits = (ptr as usize).checked_add(4).is_some_and(|end| end <= len);
            proptest::prop_assert_eq!(g.u32(ptr).is_ok(), fits);
            let _ = g.put_u64(ptr, 7);
            let _ = g.put(ptr, &[1, 2, 3]);
            if let Ok(pairs) = g.iovecs(ptr, iovs) {
                proptest::prop_assert_eq!(pairs.len(), iovs as usize);
                proptest::prop_assert!(iovs == 0 || ptr as usize + 8 * iovs as usize <= len);
            }
            let mut strings = Strings::default();
            strings.push(&[b"ab"]);
            let _ = g.put_strings(&[&strings], ptr, n);
        }
    }
}
