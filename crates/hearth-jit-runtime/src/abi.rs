//! The module's exports, over linear memory. A string is `[len: u32][u16 ×
//! len]` at a 4-aligned address; the heap is a bump pointer that is never
//! freed (each invocation has a fresh instance), and starts where the
//! compiled module's data ends (`heap_set`, from its start function).
//!
//! Memory above the heap's top is zero: a fresh instance's is, nothing is
//! freed, and scratch given back is zeroed first ([`with_scratch`]).
//! Emitted code relies on it (the JSON parser builds a string in a block
//! whose length it takes as 0).
//!
//! Addresses come from compiled code the compiler made, inside this
//! memory: a wrong one is a compiler bug, and in wasm it reads whatever
//! is there or traps, never outside the sandbox.

use core::arch::wasm32;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::{json, left, number, text};

#[link(wasm_import_module = "hearth")]
unsafe extern "C" {
    /// Ends the compiled attempt: the node runs the invocation in the
    /// isolate instead. `at` is a source offset or a [`left`] code.
    #[link_name = "leave"]
    fn hearth_leave(at: u32) -> !;
}

#[link(wasm_import_module = "wasi_snapshot_preview1")]
unsafe extern "C" {
    fn fd_read(fd: u32, iovs: *const Iovec, n: u32, nread: *mut u32) -> u16;
    fn fd_write(fd: u32, iovs: *const Iovec, n: u32, nwritten: *mut u32) -> u16;
    fn random_get(buf: *mut u8, len: u32) -> u16;
    fn environ_sizes_get(count: *mut u32, size: *mut u32) -> u16;
    fn environ_get(ptrs: *mut u32, buf: *mut u8) -> u16;
}

#[repr(C)]
struct Iovec {
    buf: u32,
    len: u32,
}

fn leave(at: u32) -> ! {
    // SAFETY: `hearth.leave` is the host's; it never returns (it traps
    // the instance with the code, which the wasm tier reads back).
    unsafe { hearth_leave(at) }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    wasm32::unreachable()
}

/// The heap's next free address.
static HEAP: AtomicU32 = AtomicU32::new(0);

/// Sets the heap's top: where the compiled module's data ends, from its
/// start function, and later what a host call's answer did not use of the
/// room it was read into, given back.
#[unsafe(no_mangle)]
pub extern "C" fn heap_set(top: u32) {
    HEAP.store(top, Relaxed);
}

/// `size` bytes, 8-aligned, growing memory as needed; leaves when the
/// sandbox's memory limit refuses.
#[unsafe(no_mangle)]
pub extern "C" fn alloc(size: u32) -> u32 {
    let p = HEAP
        .load(Relaxed)
        .checked_add(7)
        .unwrap_or_else(|| leave(left::MEMORY))
        & !7;
    let end = p.checked_add(size).unwrap_or_else(|| leave(left::MEMORY));
    let pages = (u64::from(end) + 0xFFFF) >> 16;
    let have = wasm32::memory_size(0) as u64;
    if pages > have && wasm32::memory_grow(0, (pages - have) as usize) == usize::MAX {
        leave(left::MEMORY);
    }
    HEAP.store(end, Relaxed);
    p
}

/// Runs `f` over `len` bytes of scratch on the heap, then zeroes them and
/// gives them back.
fn with_scratch<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    let top = HEAP.load(Relaxed);
    let at = alloc(len as u32);
    // SAFETY: `alloc` just gave these bytes to this call alone.
    let scratch = unsafe { core::slice::from_raw_parts_mut(at as *mut u8, len) };
    let answer = f(scratch);
    scratch.fill(0);
    HEAP.store(top, Relaxed);
    answer
}

/// The code units of the string at `s`.
fn units<'a>(s: u32) -> &'a [u16] {
    // SAFETY: `s` is a string compiled code made (a literal in its data or
    // one this module allocated): a length, then that many units, inside
    // memory, 2-aligned; nothing writes to a string once made.
    unsafe {
        let len = *(s as *const u32);
        core::slice::from_raw_parts((s + 4) as *const u16, len as usize)
    }
}

/// A new string of `len` units, for the caller to fill.
fn new_string<'a>(len: usize) -> (u32, &'a mut [u16]) {
    // Strings stay far below 4 GiB of units: past 2^28 the text leaves.
    if len >= 1 << 28 {
        leave(left::TEXT);
    }
    let s = alloc(4 + 2 * len as u32);
    // SAFETY: `alloc` just gave these bytes to this string alone, inside
    // memory and 8-aligned.
    unsafe {
        *(s as *mut u32) = len as u32;
        (s, core::slice::from_raw_parts_mut((s + 4) as *mut u16, len))
    }
}

/// Bytes `[at, at + len)` of memory.
fn bytes<'a>(at: u32, len: u32) -> &'a [u8] {
    // SAFETY: a block compiled code or the host wrote, inside memory.
    unsafe { core::slice::from_raw_parts(at as *const u8, len as usize) }
}

#[unsafe(no_mangle)]
pub extern "C" fn to_int32(x: f64) -> i32 {
    number::to_int32(x)
}

#[unsafe(no_mangle)]
pub extern "C" fn rem(a: f64, b: f64) -> f64 {
    number::rem(a, b)
}

/// `a + b` of two strings.
#[unsafe(no_mangle)]
pub extern "C" fn concat(a: u32, b: u32) -> u32 {
    let (x, y) = (units(a), units(b));
    if x.is_empty() {
        return b;
    }
    if y.is_empty() {
        return a;
    }
    let (s, out) = new_string(x.len() + y.len());
    out[..x.len()].copy_from_slice(x);
    out[x.len()..].copy_from_slice(y);
    s
}

/// `a === b` of two strings.
#[unsafe(no_mangle)]
pub extern "C" fn str_eq(a: u32, b: u32) -> i32 {
    i32::from(a == b || units(a) == units(b))
}

/// `String(x)`.
#[unsafe(no_mangle)]
pub extern "C" fn num_to_str(x: f64) -> u32 {
    let mut digits = [0u8; number::MAX_LEN];
    let n = number::to_string(x, &mut digits);
    let (s, out) = new_string(n);
    for (o, &d) in out.iter_mut().zip(&digits[..n]) {
        *o = u16::from(d);
    }
    s
}

/// `Number(s)`.
#[unsafe(no_mangle)]
pub extern "C" fn str_to_num(s: u32) -> f64 {
    let u = units(s);
    with_scratch(u.len(), |scratch| number::parse(u, scratch))
        .unwrap_or_else(|_| leave(left::NUMBER))
}

/// Builds `JSON.parse`'s values as compiled code reads them ([`json::cell`]).
struct Cells;

impl Cells {
    fn cell(tag: i32, ptr: u32) -> u32 {
        let c = alloc(json::cell::SIZE);
        // SAFETY: `alloc` just gave these 16 bytes, 8-aligned, to this
        // cell alone.
        unsafe {
            *(c as *mut i32) = tag;
            *((c + json::cell::PTR as u32) as *mut u32) = ptr;
        }
        c
    }
}

/// An array block being filled: `[len][cap][data]`, items of `words`
/// 4-byte words, as compiled code's arrays are (and grow: room doubled
/// plus four).
struct Block {
    at: u32,
    words: u32,
}

impl json::Builder for Cells {
    type Value = u32;
    type List = Block;

    fn null(&mut self) -> u32 {
        Cells::cell(json::cell::NULL, 0)
    }

    fn boolean(&mut self, b: bool) -> u32 {
        Cells::cell(
            if b {
                json::cell::TRUE
            } else {
                json::cell::FALSE
            },
            0,
        )
    }

    fn number(&mut self, x: f64) -> u32 {
        let c = Cells::cell(json::cell::NUMBER, 0);
        // SAFETY: inside the cell just made, 8-aligned.
        unsafe { *((c + json::cell::NUM as u32) as *mut f64) = x };
        c
    }

    fn string(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u16])) -> u32 {
        let (s, out) = new_string(len);
        fill(out);
        Cells::cell(json::cell::STRING, s)
    }

    type Key = u32;

    /// A key is the bare string: a pair is `(string, cell)`.
    fn key(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u16])) -> u32 {
        let (s, out) = new_string(len);
        fill(out);
        s
    }

    fn with_scratch(
        &mut self,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]) -> Option<f64>,
    ) -> Option<f64> {
        with_scratch(len, f)
    }

    fn list(&mut self, object: bool) -> Block {
        const ROOM: u32 = 4;
        let words = if object { 2 } else { 1 };
        let at = alloc(12);
        let data = alloc(4 * words * ROOM);
        // SAFETY: `alloc` just gave these 12 bytes to this block alone.
        unsafe {
            let b = at as *mut u32;
            *b = 0;
            *b.add(1) = ROOM;
            *b.add(2) = data;
        }
        Block { at, words }
    }

    fn push(&mut self, list: &mut Block, key: Option<u32>, value: u32) {
        let size = 4 * list.words;
        // SAFETY: `list.at` is a block this builder made; its data holds
        // `cap` items, and a full one is moved to room twice as large.
        unsafe {
            let b = list.at as *mut u32;
            let (len, cap) = (*b, *b.add(1));
            if len >= cap {
                let cap = 2 * cap + 4;
                let data = alloc(cap * size);
                core::ptr::copy_nonoverlapping(
                    *b.add(2) as *const u8,
                    data as *mut u8,
                    (len * size) as usize,
                );
                *b.add(1) = cap;
                *b.add(2) = data;
            }
            let item = (*b.add(2) + len * size) as *mut u32;
            match key {
                Some(k) => {
                    *item = k;
                    *item.add(1) = value;
                }
                None => *item = value,
            }
            *b = len + 1;
        }
    }

    fn finish(&mut self, list: Block, object: bool) -> u32 {
        let tag = if object {
            json::cell::OBJECT
        } else {
            json::cell::ARRAY
        };
        Cells::cell(tag, list.at)
    }
}

/// `JSON.parse(s)`: the value's cell. Text the parser does not take
/// leaves, for the isolate's `SyntaxError` (or its deeper parse).
#[unsafe(no_mangle)]
pub extern "C" fn json_parse(s: u32) -> u32 {
    json::parse(units(s), &mut Cells).unwrap_or_else(|_| leave(left::JSON))
}

/// The cell of `key` in an object's pairs (the last, as JavaScript keeps
/// the last of a repeated key), or 0.
#[unsafe(no_mangle)]
pub extern "C" fn json_get(pairs: u32, key: u32) -> u32 {
    // SAFETY: `pairs` is an object's block `json_parse` made: `len`
    // (key, cell) pairs at `data`.
    let pairs = unsafe {
        let b = pairs as *const u32;
        core::slice::from_raw_parts(*b.add(2) as *const [u32; 2], *b as usize)
    };
    let wanted = units(key);
    pairs
        .iter()
        .rev()
        .find(|[k, _]| *k == key || units(*k) == wanted)
        .map_or(0, |[_, cell]| *cell)
}

/// A string of the ASCII bytes `[at, at + len)`; other text leaves.
#[unsafe(no_mangle)]
pub extern "C" fn ascii_in(at: u32, len: u32) -> u32 {
    let b = bytes(at, len);
    let (s, out) = new_string(b.len());
    if !text::ascii_units(b, out) {
        leave(left::TEXT);
    }
    s
}

/// `await request.text()`: stdin whole, as a string; a body that is not
/// ASCII leaves (decoding UTF-8 exactly is the isolate's).
#[unsafe(no_mangle)]
pub extern "C" fn read_body() -> u32 {
    const CHUNK: u32 = 64 << 10;
    let start = alloc(0);
    let mut total: u32 = 0;
    loop {
        // Room for the next chunk right after what was read.
        HEAP.store(start + total, Relaxed);
        let buf = alloc(CHUNK);
        let iov = Iovec { buf, len: CHUNK };
        let mut n: u32 = 0;
        // SAFETY: one iovec over room `alloc` gave; `n` is this frame's.
        if unsafe { fd_read(0, &iov, 1, &mut n) } != 0 {
            leave(left::TEXT);
        }
        if n == 0 {
            break;
        }
        total = total.checked_add(n).unwrap_or_else(|| leave(left::TEXT));
    }
    HEAP.store(start + total, Relaxed);
    ascii_in(start, total)
}

/// Writes response `r` (`[status: f64][body: string][headers: block]`,
/// the headers the CGI lines compiling made, `[len: u32][bytes]`) to
/// stdout: the header lines, `status: NNN`, a blank line, then the body
/// as UTF-8, lone surrogates as U+FFFD (as `TextEncoder` does). A status
/// that is not an integer in 200–599 leaves.
#[unsafe(no_mangle)]
pub extern "C" fn write_response(r: u32) {
    // SAFETY: a response compiled code made, 8-aligned, inside memory.
    let (status, body, headers) = unsafe {
        (
            *(r as *const f64),
            *((r + 8) as *const u32),
            *((r + 12) as *const u32),
        )
    };
    let code = status as u32;
    if f64::from(code) != status || !(200..=599).contains(&code) {
        leave(left::STATUS);
    }
    // SAFETY: the block's length word, inside memory.
    let head = bytes(headers + 4, unsafe { *(headers as *const u32) });
    let body = units(body);
    let room = head.len() + 13 + 3 * body.len();
    let at = alloc(u32::try_from(room).unwrap_or_else(|_| leave(left::TEXT)));
    // SAFETY: `alloc` just gave these bytes to this call alone.
    let out = unsafe { core::slice::from_raw_parts_mut(at as *mut u8, room) };
    out[..head.len()].copy_from_slice(head);
    let mut n = head.len();
    let line = [
        b's',
        b't',
        b'a',
        b't',
        b'u',
        b's',
        b':',
        b' ',
        b'0' + (code / 100) as u8,
        b'0' + (code / 10 % 10) as u8,
        b'0' + (code % 10) as u8,
        b'\n',
        b'\n',
    ];
    out[n..n + line.len()].copy_from_slice(&line);
    n += line.len();
    n += text::utf8(body, &mut out[n..]);
    let iov = Iovec {
        buf: at,
        len: n as u32,
    };
    let mut written = 0;
    // SAFETY: one iovec over the bytes just written; `written` is this
    // frame's.
    if unsafe { fd_write(1, &iov, 1, &mut written) } != 0 {
        // A refused write is a response past its limit: trap, and the
        // sandbox says so.
        wasm32::unreachable();
    }
}

/// `Math.random`'s xorshift128 state, four words; all zero until the
/// first draw seeds it.
static RANDOM: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];

/// `Math.random()` as the isolate's prelude computes it: xorshift128 on
/// four 32-bit words, seeded on first use by one host call for 16 random
/// bytes (taped, so a replay draws the same numbers); the state starts
/// unseeded with each instance.
#[unsafe(no_mangle)]
pub extern "C" fn random() -> f64 {
    let s = &RANDOM;
    if s.iter().all(|w| w.load(Relaxed) == 0) {
        let mut seed = [0u8; 16];
        // SAFETY: 16 bytes of this frame. A failed call leaves them zero,
        // as the emitted code did.
        unsafe { random_get(seed.as_mut_ptr(), 16) };
        for (w, b) in s.iter().zip(seed.chunks_exact(4)) {
            w.store(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), Relaxed);
        }
        // All four zero: the first is 1.
        if s.iter().all(|w| w.load(Relaxed) == 0) {
            s[0].store(1, Relaxed);
        }
    }
    let (mut t, s0) = (s[3].load(Relaxed), s[0].load(Relaxed));
    s[3].store(s[2].load(Relaxed), Relaxed);
    s[2].store(s[1].load(Relaxed), Relaxed);
    s[1].store(s0, Relaxed);
    t ^= t << 11;
    t ^= t >> 8;
    let next = t ^ s0 ^ (s0 >> 19);
    s[0].store(next, Relaxed);
    f64::from(next) / 4_294_967_296.0
}

/// A string being built (`JSON.stringify`'s text): `[str: u32][cap:
/// u32]`, `str` a string with room for `cap` units; finishing is reading
/// `str`. Compiled code appends the structure (brackets, keys, commas)
/// as literals, knowing every value's type, and values with these.
#[repr(C)]
struct Builder {
    s: u32,
    cap: u32,
}

/// Strings past this many units leave (no sandbox has the memory).
const MAX_ROOM: usize = 1 << 28;

impl Builder {
    /// The builder at `sb`.
    fn at<'a>(sb: u32) -> &'a mut Builder {
        // SAFETY: `sb` is a builder `sb_new` made, 8 bytes, 8-aligned.
        unsafe { &mut *(sb as *mut Builder) }
    }

    /// Room for `n` more units (moving the text to twice its room, or
    /// more, when full): the slice they go in. The length is not changed.
    fn room<'a>(&mut self, n: usize) -> &'a mut [u16] {
        let len = units(self.s).len();
        if n > MAX_ROOM || len + n > MAX_ROOM {
            leave(left::TEXT);
        }
        if len + n > self.cap as usize {
            let cap = (2 * self.cap as usize).max(len + n);
            let (s, out) = new_string(cap);
            out[..len].copy_from_slice(units(self.s));
            // SAFETY: `s` was just made; its length is what is in it.
            unsafe { *(s as *mut u32) = len as u32 };
            self.s = s;
            self.cap = cap as u32;
        }
        // SAFETY: the string has room for `cap` units, `len + n` of them
        // within it; only this builder writes to it.
        unsafe { core::slice::from_raw_parts_mut((self.s + 4 + 2 * len as u32) as *mut u16, n) }
    }

    /// Counts `n` more units written into the room.
    fn grow(&mut self, n: usize) {
        // SAFETY: as in `room`: the string's length word.
        unsafe { *(self.s as *mut u32) += n as u32 };
    }

    fn push(&mut self, text: &[u16]) {
        self.room(text.len()).copy_from_slice(text);
        self.grow(text.len());
    }
}

/// An empty builder with room for 16 units.
#[unsafe(no_mangle)]
pub extern "C" fn sb_new() -> u32 {
    let sb = alloc(8);
    let (s, _) = new_string(16);
    // SAFETY: `s` was just made; it starts empty.
    unsafe { *(s as *mut u32) = 0 };
    *Builder::at(sb) = Builder { s, cap: 16 };
    sb
}

/// Appends string `s`'s units.
#[unsafe(no_mangle)]
pub extern "C" fn sb_push(sb: u32, s: u32) {
    Builder::at(sb).push(units(s));
}

/// Appends string `s` as `JSON.stringify` quotes it.
#[unsafe(no_mangle)]
pub extern "C" fn sb_quote(sb: u32, s: u32) {
    let u = units(s);
    if u.len() > MAX_ROOM / 6 {
        leave(left::TEXT);
    }
    let b = Builder::at(sb);
    let n = text::json_quote(u, b.room(text::json_quote_room(u.len())));
    b.grow(n);
}

/// Appends `x` as `JSON.stringify` prints a number: `null` for NaN and
/// the infinities, else as `String(x)`.
#[unsafe(no_mangle)]
pub extern "C" fn sb_num(sb: u32, x: f64) {
    let b = Builder::at(sb);
    if !x.is_finite() {
        return b.push(&[0x6E, 0x75, 0x6C, 0x6C]);
    }
    let mut digits = [0u8; number::MAX_LEN];
    let n = number::to_string(x, &mut digits);
    let out = b.room(n);
    for (o, &d) in out.iter_mut().zip(&digits[..n]) {
        *o = u16::from(d);
    }
    b.grow(n);
}

/// String `s`'s units as bytes (its UTF-8, as the isolate sends a KV key
/// or value, or a URL), the string's length of them; text that is not
/// ASCII leaves.
#[unsafe(no_mangle)]
pub extern "C" fn ascii_out(s: u32) -> u32 {
    let u = units(s);
    let at = alloc(u.len() as u32);
    // SAFETY: `alloc` just gave these bytes to this call alone.
    let out = unsafe { core::slice::from_raw_parts_mut(at as *mut u8, u.len()) };
    for (o, &c) in out.iter_mut().zip(u) {
        if c >= 0x80 {
            leave(left::TEXT);
        }
        *o = c as u8;
    }
    at
}

/// WASI's environment, read once per instance: `NAME=value` strings,
/// NUL-terminated, in the order the host lists them.
static ENVIRON: AtomicU32 = AtomicU32::new(0);
static ENVIRON_COUNT: AtomicU32 = AtomicU32::new(0);

/// The value of the first variable in the environment that starts with
/// `prefix` (a `[len: u32][bytes]` block, `NAME=`) as a string, or 0 if
/// none does. The wasm tier lists the function's own variables before
/// CGI's, so the first match is the one the isolate's `env.NAME` has.
#[unsafe(no_mangle)]
pub extern "C" fn env_get(prefix: u32) -> u32 {
    if ENVIRON.load(Relaxed) == 0 {
        let (mut count, mut size) = (0u32, 0u32);
        // SAFETY: WASI writes the two counts; then `count` pointers and
        // `size` bytes into room just allocated for them.
        let ptrs = unsafe {
            if environ_sizes_get(&mut count, &mut size) != 0 {
                leave(left::HOST);
            }
            let ptrs = alloc(4 * count + size);
            if environ_get(ptrs as *mut u32, (ptrs + 4 * count) as *mut u8) != 0 {
                leave(left::HOST);
            }
            ptrs
        };
        ENVIRON_COUNT.store(count, Relaxed);
        ENVIRON.store(ptrs, Relaxed);
    }
    // SAFETY: `prefix` is a block in the module's data; the pointers were
    // written by WASI above, each to a NUL-terminated string.
    let (prefix, vars) = unsafe {
        let len = *(prefix as *const u32);
        (
            bytes(prefix + 4, len),
            core::slice::from_raw_parts(
                ENVIRON.load(Relaxed) as *const u32,
                ENVIRON_COUNT.load(Relaxed) as usize,
            ),
        )
    };
    for &var in vars {
        // SAFETY: as above: a NUL-terminated string WASI wrote.
        let var = unsafe { core::ffi::CStr::from_ptr(var as *const core::ffi::c_char) }.to_bytes();
        if let Some(value) = var.strip_prefix(prefix) {
            return ascii_in(value.as_ptr() as u32, value.len() as u32);
        }
    }
    0
}
