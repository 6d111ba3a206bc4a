//! The compiler against QuickJS: each function runs traced in a QuickJS
//! context (with a small stand-in for the isolate's `Request` and
//! `Response`), what the traced runs saw is compiled, and the module, run
//! in wasmtime, must answer as the interpreter did, byte for byte, or
//! leave.
//!
//! The daemon's own test (`crates/hearth/tests/all/jit.rs`) makes the same
//! comparison through the real isolate and wasm tier.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use hearth_jit::{Plan, Trace};
use rquickjs::{CatchResultExt, Context, Module, Object, Promise, Runtime};
use wasmtime::{Caller, Engine, Linker, Memory, Store};

const PLATFORM: &str = r#"
globalThis.__lines = [];
globalThis.console = { log: (...a) => __lines.push(a.join(" ")) };
globalThis.Request = class Request {
  constructor(body) { this._body = body; }
  async text() { return this._body; }
  async json() { return JSON.parse(this._body); }
};
globalThis.Response = class Response {
  constructor(body, init) {
    this.body = String(body ?? "");
    this.status = (init && init.status) ?? 200;
    // The header lines, as the isolate's sorted `Headers` gives them.
    const h = {};
    for (const [k, v] of Object.entries((init && init.headers) || {})) h[k.toLowerCase()] = String(v).trim();
    if (!("content-type" in h)) h["content-type"] = "text/plain;charset=UTF-8";
    this.head = Object.keys(h).sort().map((k) => `${k}: ${h[k]}\n`).join("");
  }
  static json(data, init = {}) {
    const headers = { ...(init.headers || {}) };
    if (!Object.keys(headers).some((k) => k.toLowerCase() === "content-type")) headers["content-type"] = "application/json";
    return new Response(JSON.stringify(data), { ...init, headers });
  }
};
globalThis.__run = async (body) => {
  const r = await __handler.fetch(new Request(body));
  return [r.status, r.head + r.body];
};
"#;

/// A QuickJS context holding one module's handler.
struct Interpreter {
    _rt: Runtime,
    ctx: Context,
}

impl Interpreter {
    fn new(source: &str) -> Interpreter {
        let rt = Runtime::new().unwrap();
        let ctx = Context::full(&rt).unwrap();
        ctx.with(|ctx| {
            ctx.eval::<(), _>(PLATFORM).catch(&ctx).unwrap();
            let (module, done) = Module::declare(ctx.clone(), "handler", source)
                .catch(&ctx)
                .unwrap()
                .eval()
                .catch(&ctx)
                .unwrap();
            done.finish::<()>().catch(&ctx).unwrap();
            let handler: Object = module.get("default").unwrap();
            ctx.globals().set("__handler", handler).unwrap();
        });
        Interpreter { _rt: rt, ctx }
    }

    /// `(status, body, console lines)`.
    fn run(&self, body: &str) -> (u32, String, Vec<String>) {
        self.ctx.with(|ctx| {
            let run: rquickjs::Function = ctx.globals().get("__run").unwrap();
            let p: Promise = run.call((body,)).catch(&ctx).unwrap();
            let answer: rquickjs::Array = p.finish().catch(&ctx).unwrap();
            let (status, text): (u32, String) = (answer.get(0).unwrap(), answer.get(1).unwrap());
            let lines: Vec<String> = ctx.eval("__lines.splice(0)").unwrap();
            (status, text, lines)
        })
    }
}

/// What a compiled module did.
#[derive(Debug, PartialEq)]
enum Ran {
    Answered(u32, String),
    Left(u32),
}

struct Io {
    stdin: Vec<u8>,
    read: usize,
    stdout: Vec<u8>,
}

fn memory(c: &mut Caller<'_, Io>) -> Memory {
    c.get_export("memory").unwrap().into_memory().unwrap()
}

/// The `(address, length)` of each of the `n` iovecs at `iovs`.
fn iovecs(c: &mut Caller<'_, Io>, iovs: i32, n: i32) -> (Memory, Vec<(usize, usize)>) {
    let mem = memory(c);
    let list = (0..n as usize)
        .map(|k| {
            let mut iov = [0u8; 8];
            mem.read(&*c, iovs as usize + 8 * k, &mut iov).unwrap();
            let word = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap()) as usize;
            (word(&iov[..4]), word(&iov[4..]))
        })
        .collect();
    (mem, list)
}

fn run_module(engine: &Engine, wasm: &[u8], body: &str) -> Ran {
    let module = wasmtime::Module::new(engine, wasm).expect("the module validates");
    let runtime = wasmtime::Module::new(engine, hearth_jit::RUNTIME).unwrap();
    run_compiled(engine, &runtime, &module, body)
}

/// Runs `module` with the runtime it imports (both compiled for `engine`).
fn run_compiled(
    engine: &Engine,
    runtime: &wasmtime::Module,
    module: &wasmtime::Module,
    body: &str,
) -> Ran {
    let module = module.clone();
    let mut linker = Linker::new(engine);
    linker
        .func_wrap(
            "wasi_snapshot_preview1",
            "fd_read",
            |mut c: Caller<'_, Io>, _fd: i32, iovs: i32, n: i32, nread: i32| -> i32 {
                let (mem, list) = iovecs(&mut c, iovs, n);
                let mut total = 0u32;
                for (at, len) in list {
                    let io = c.data();
                    let take = len.min(io.stdin.len() - io.read);
                    let chunk = io.stdin[io.read..io.read + take].to_vec();
                    c.data_mut().read += take;
                    mem.write(&mut c, at, &chunk).unwrap();
                    total += take as u32;
                }
                mem.write(&mut c, nread as usize, &total.to_le_bytes())
                    .unwrap();
                0
            },
        )
        .unwrap();
    linker
        .func_wrap(
            "wasi_snapshot_preview1",
            "fd_write",
            |mut c: Caller<'_, Io>, _fd: i32, iovs: i32, n: i32, nwritten: i32| -> i32 {
                let (mem, list) = iovecs(&mut c, iovs, n);
                let mut total = 0u32;
                for (at, len) in list {
                    let mut bytes = vec![0u8; len];
                    mem.read(&c, at, &mut bytes).unwrap();
                    c.data_mut().stdout.extend_from_slice(&bytes);
                    total += len as u32;
                }
                mem.write(&mut c, nwritten as usize, &total.to_le_bytes())
                    .unwrap();
                0
            },
        )
        .unwrap();
    linker
        .func_wrap(
            "hearth",
            "leave",
            |_: Caller<'_, Io>, at: i32| -> wasmtime::Result<()> {
                Err(wasmtime::Error::msg(format!("left:{}", at as u32)))
            },
        )
        .unwrap();
    // The functions here use no clock, randomness, environment, KV nor
    // HTTP; the daemon's tests compare those with the isolate's through
    // the real host layer. Randomness and the environment are the
    // runtime's imports.
    for name in ["random_get", "environ_sizes_get", "environ_get"] {
        linker
            .func_wrap(
                "wasi_snapshot_preview1",
                name,
                move |_: i32, _: i32| -> wasmtime::Result<i32> {
                    Err(wasmtime::Error::msg(format!("{name} was called")))
                },
            )
            .unwrap();
    }
    for (module_name, name) in [
        ("wasi_snapshot_preview1", "clock_time_get"),
        ("hearth", "kv_get"),
        ("hearth", "kv_set"),
        ("hearth", "http_fetch"),
        ("hearth", "url_href"),
    ] {
        linker
            .func_new(
                module_name,
                name,
                module
                    .imports()
                    .find(|i| i.name() == name)
                    .and_then(|i| i.ty().func().cloned())
                    .unwrap(),
                move |_, _, _| Err(wasmtime::Error::msg(format!("{name} was called"))),
            )
            .unwrap();
    }
    let mut store = Store::new(
        engine,
        Io {
            stdin: body.as_bytes().to_vec(),
            read: 0,
            stdout: vec![],
        },
    );
    // The runtime first: the module imports its memory and functions.
    let rt = linker.instantiate(&mut store, runtime).unwrap();
    linker
        .instance(&mut store, hearth_jit::RUNTIME_NAME, rt)
        .unwrap();
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let start = instance
        .get_typed_func::<(), ()>(&mut store, "_start")
        .unwrap();
    match start.call(&mut store, ()) {
        Ok(()) => {}
        Err(e) => {
            let msg = e.root_cause().to_string();
            let at = msg
                .strip_prefix("left:")
                .unwrap_or_else(|| panic!("the module trapped: {e:?}"));
            return Ran::Left(at.parse().unwrap());
        }
    }
    let out = String::from_utf8(std::mem::take(&mut store.data_mut().stdout)).unwrap();
    let (head, body) = out.split_once("\n\n").expect("a CGI head");
    let status = head
        .lines()
        .find_map(|l| l.strip_prefix("status: "))
        .expect("a status header")
        .trim()
        .parse()
        .unwrap();
    // The other header lines, then the body: as `__run` gives them.
    let headers: String = head
        .lines()
        .filter(|l| !l.starts_with("status: "))
        .map(|l| format!("{l}\n"))
        .collect();
    Ran::Answered(status, headers + body)
}

/// A handler traced over bodies in QuickJS and compiled, with QuickJS
/// running the plain handler beside it.
struct Compiled {
    plan: Plan,
    plain: Interpreter,
    engine: Engine,
    runtime: wasmtime::Module,
    module: wasmtime::Module,
}

impl Compiled {
    fn new(source: &str, training: &[&str]) -> Compiled {
        let plan = Plan::new(source).unwrap_or_else(|r| panic!("refused: {r}"));
        let traced = Interpreter::new(&plan.traced_source());
        let plain = Interpreter::new(source);
        let mut trace: Trace = plan.trace();
        for body in training {
            let (status, text, lines) = traced.run(body);
            let (plain_status, plain_text, _) = plain.run(body);
            assert_eq!(
                (status, text),
                (plain_status, plain_text),
                "tracing changed the answer"
            );
            let merged = lines.iter().filter(|l| trace.merge_line(l)).count();
            assert_eq!(merged, 1, "one trace line per run: {lines:?}");
        }
        let wasm = plan
            .compile(&trace)
            .unwrap_or_else(|r| panic!("not compiled: {r}"));
        let engine = Engine::default();
        let module = wasmtime::Module::new(&engine, &wasm).expect("the module validates");
        let runtime = wasmtime::Module::new(&engine, hearth_jit::RUNTIME).unwrap();
        Compiled {
            plan,
            plain,
            engine,
            runtime,
            module,
        }
    }

    /// Runs `body` compiled and in QuickJS: `Ok(true)` if the compiled
    /// code answered as QuickJS did, `Ok(false)` if it left, `Err` with
    /// both answers if it answered otherwise.
    fn check(&self, body: &str) -> Result<bool, String> {
        let (status, text, _) = self.plain.run(body);
        match run_compiled(&self.engine, &self.runtime, &self.module, body) {
            Ran::Answered(s, t) if (s, t.as_str()) == (status, text.as_str()) => Ok(true),
            Ran::Answered(s, t) => Err(format!(
                "for body {body:?}: compiled {s} {t:?}, QuickJS {status} {text:?}"
            )),
            Ran::Left(at) => {
                eprintln!("left for {body:?}: {}", self.plan.where_left(at));
                Ok(false)
            }
        }
    }
}

/// Traces `source` over `training`, compiles, then checks every body in
/// `training` and `checks`: each compiled answer is QuickJS's, or the
/// module left. Returns how many it answered.
fn differential(source: &str, training: &[&str], checks: &[&str]) -> usize {
    let compiled = Compiled::new(source, training);
    let mut answered = 0;
    for body in training.iter().chain(checks) {
        match compiled.check(body) {
            Ok(true) => answered += 1,
            Ok(false) => {}
            Err(e) => panic!("{e}"),
        }
    }
    answered
}

const MAZE: &str = include_str!("../../../examples/js/maze.mjs");

#[test]
fn the_maze_compiles_and_answers_as_quickjs_does() {
    assert_eq!(differential(MAZE, &[""], &["x"]), 2);
}

const WORDS: &str = include_str!("../../../examples/js/words.mjs");

#[test]
fn string_processing_compiles_and_answers_as_quickjs_does() {
    let n = differential(
        WORDS,
        &["The quick brown fox", "a  b", ""],
        &["jumps over the lazy dog!", "Hello, World", "x", "   "],
    );
    assert_eq!(n, 7);
}

const PRIMES: &str = include_str!("../../../examples/js/primes.mjs");

#[test]
fn numeric_loops_compile_and_answer_as_quickjs_does() {
    let n = differential(PRIMES, &["100", "2000"], &["0", "1", "7919", " 42 "]);
    assert_eq!(n, 6);
}

#[test]
fn what_the_trace_never_saw_leaves_for_the_isolate() {
    // Trained only on short bodies: the branch for long ones was never
    // taken, so the compiled code leaves there rather than guess.
    let src = r#"
export default {
  async fetch(request) {
    const t = await request.text();
    if (t.length > 3) { return new Response("long:" + t.length * 1.5); }
    return new Response("short");
  },
};
"#;
    let plan = Plan::new(src).unwrap();
    let traced = Interpreter::new(&plan.traced_source());
    let mut trace = plan.trace();
    for line in traced.run("ab").2 {
        trace.merge_line(&line);
    }
    let wasm = plan.compile(&trace).unwrap();
    let engine = Engine::default();
    assert_eq!(
        run_module(&engine, &wasm, "ab"),
        Ran::Answered(200, "content-type: text/plain;charset=UTF-8\nshort".into())
    );
    let Ran::Left(at) = run_module(&engine, &wasm, "abcdef") else {
        panic!("a branch the trace never took must leave")
    };
    assert!(
        plan.where_left(at).contains("never reached"),
        "{}",
        plan.where_left(at)
    );
}

#[test]
fn what_the_compiler_does_not_take_is_refused_with_where() {
    for (src, says) in [
        (
            "export default { fetch() { const o = {a: 1}; return new Response(o.b); } };",
            "object made without it",
        ),
        (
            "export default { fetch() { const o = {a: 1}; o.a = 'x'; return new Response('x'); } };",
            "another kind of value",
        ),
        (
            "export default { fetch() { return new Response('x', { headers: { 'x-a': String(1) } }); } };",
            "string literal",
        ),
        (
            "export default { fetch() { return new Response('x', { headers: { 'x-a': 'a\\nstatus: 500' } }); } };",
            "printable ASCII",
        ),
        (
            "export default { fetch(r) { const p = fetch('x'); return new Response('x'); } };",
            "fetch",
        ),
        (
            "export default { async fetch(r) { const m = 'GET'; await fetch('http://a/', { method: m }); return new Response('x'); } };",
            "not a literal",
        ),
        (
            "export default { async fetch(r) { await fetch('http://a/', { body: 'x' }); return new Response('x'); } };",
            "GET or HEAD",
        ),
        (
            "export default { async fetch(r) { const a = await fetch('http://a/'); return new Response(a.headers); } };",
            "`headers` of a fetched response",
        ),
        (
            "export default { async fetch(r, env) { return new Response(env.NAME); } };",
            "not always a string",
        ),
        (
            "var x = 1; export default { fetch() { return new Response('x'); } };",
            "1:1",
        ),
        (
            "export default { fetch() { try { } catch (e) {} return new Response('x'); } };",
            "statement",
        ),
        // Work after the response runs in the isolate, which has it.
        (
            "export default { async fetch(r, env, ctx) { ctx.waitUntil(fetch('http://a/')); return new Response('x'); } };",
            "ctx",
        ),
        (
            "export default { async fetch(r, env) { env.hearth.waitUntil(fetch('http://a/')); return new Response('x'); } };",
            "env.hearth",
        ),
    ] {
        match Plan::new(src) {
            Err(r) => assert!(r.to_string().contains(says), "{r}"),
            Ok(plan) => {
                // Lowered, but the compiler must still refuse it.
                let mut trace = plan.trace();
                trace.masks.iter_mut().for_each(|m| *m = u32::MAX >> 14);
                match plan.compile(&trace) {
                    Ok(_) => panic!("{src} compiled"),
                    Err(r) => assert!(r.to_string().contains(says), "{src}: {r}"),
                }
            }
        }
    }
}

/// `%` and ToInt32 have inline int32 paths beside their helpers: both must
/// give QuickJS's answers on every sign, zero, -0, int32 overflow and
/// value past 2^31 a stream of bodies reaches.
#[test]
fn remainder_and_int32_conversions_answer_as_quickjs_does_on_either_path() {
    let src = r#"
export default {
  async fetch(request) {
    const n = Number(await request.text());
    let out = "";
    for (let i = -n; i <= n; i++) {
      const a = i * 7919 - 3;
      const b = (i % 13) - 6;
      const big = a * 1000003;
      const z = (-i) % 5;
      out += `${a % b} ${big % (b * 65537)} ${(a * 2654435761) | 0} ${z === 0 && 1 / z < 0} ${(i * 2147483647) >>> 3} ${big % 4294967296};`;
    }
    return new Response(out);
  },
};
"#;
    let bodies: Vec<String> = (0..40).map(|k| (k * 23).to_string()).collect();
    let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let n = differential(src, &bodies[..4], &bodies[4..]);
    assert_eq!(n, bodies.len(), "every body answered compiled");
}

/// A table written out as a for-of's array is built once per invocation
/// only where no pass can change it: an inner array bound to a name (and
/// changed) is built afresh each pass, as the interpreter does.
#[test]
fn loops_over_written_out_tables_answer_as_quickjs_does() {
    let src = r#"
export default {
  async fetch(request) {
    const n = Number(await request.text());
    let out = "";
    for (let k = 0; k < n; k++) {
      for (const d of [[1, 2], [3, 4]]) { d[0] = d[0] + k; out += d[0] + ","; }
      for (const [a, b] of [[5, -6], [7, 8]]) { out += (a + b) + ";"; }
      for (const x of [1, -2, 3]) { out += x; }
    }
    return new Response(out);
  },
};
"#;
    assert_eq!(differential(src, &["3"], &["0", "1", "9"]), 4);
}

/// Variables that held only int32s when traced are kept in `i32`s; a
/// store of anything else (a fraction, -0, past 2^31) must leave, never
/// answer otherwise than QuickJS.
#[test]
fn int32_variables_leave_where_a_value_is_not_one() {
    let src = r#"
export default {
  async fetch(request) {
    let n = 0;
    n = Number(await request.text());
    let k = n;
    let s = 0;
    for (let i = 0; i < 5; i++) { s = s + k; k = k * 3; }
    let z = (n - 5) * 0;
    let j = 2147483640;
    for (let t = 0; t < n % 9; t++) j++;
    let h = n;
    h = h / 2;
    return new Response(`${s} ${k} ${1 / z} ${j} ${n % 7} ${k % n} ${n < k} ${h > 3}`);
  },
};
"#;
    // Trained on values that keep every variable an int32.
    let training = ["6", "10", "12", "20"];
    let plan = Plan::new(src).unwrap();
    let traced = Interpreter::new(&plan.traced_source());
    let mut trace = plan.trace();
    for body in training {
        for line in traced.run(body).2 {
            trace.merge_line(&line);
        }
    }
    let wasm = plan.compile(&trace).unwrap();
    let engine = Engine::default();
    let plain = Interpreter::new(src);
    // Each of these stores one thing an int32 cannot hold: -0 into `z`
    // (1 / z would be Infinity), 2^31 into `j`, 2.4 × 10^9 into `s`, 3.5
    // into `h`.
    for body in ["2", "26", "20000000", "7"] {
        let ran = run_module(&engine, &wasm, body);
        assert!(matches!(ran, Ran::Left(_)), "{body}: {ran:?}");
    }
    // And these are int32s throughout: the same answers.
    for body in ["6", "12", "14", "100"] {
        let (status, text, _) = plain.run(body);
        assert_eq!(
            run_module(&engine, &wasm, body),
            Ran::Answered(status, text),
            "{body}"
        );
    }
}

const STATS: &str = include_str!("../../../examples/js/stats.mjs");

/// Plain objects (literals, fields read, written and counted, arrays of
/// them) and JSON: `JSON.stringify` of every kind of value and
/// `Response.json`, with the isolate's content type.
#[test]
fn objects_and_json_answer_as_quickjs_does() {
    let n = differential(
        STATS,
        &["3,1,4,1,5,9,2,6", "10", "7,7,7,-3", "", "1,x"],
        &[
            "0",
            "1,2,3,4,5,6,7,8,9,10,11,12",
            "-5,-50,500",
            "x",
            "2,,3",
            "--1",
        ],
    );
    assert_eq!(n, 11);
}

/// Strings in JSON are quoted as QuickJS quotes them: quotes, backslashes,
/// the named escapes, other control characters, surrogate pairs and lone
/// surrogates; NaN and the infinities are `null`; objects compare by
/// identity; headers given literally are the isolate's, sorted.
#[test]
fn json_text_is_quickjs_s_to_the_unit() {
    let src = r#"
export default {
  async fetch(request) {
    const t = await request.text();
    const n = Number(t);
    const o = { text: t, esc: "q\"b\\n\nr\rt\tb\bf\f" + String.fromCharCode(1) + String.fromCharCode(31) + "~",
                pair: String.fromCharCode(0xD83D) + String.fromCharCode(0xDE00), lone: String.fromCharCode(0xD800) + "x" + String.fromCharCode(0xDC00),
                nan: (n - n) / (n - n), inf: 1 / (n - n), negz: -0 * n, ok: n > 2, nested: { list: [n, n * 2], empty: {} } };
    const same = o === o, other = o === { text: t };
    o.nested.list[1] += 1;
    o.text += "!";
    return new Response(JSON.stringify({ o, same, other }), {
      status: 201,
      headers: { "Content-Type": "application/json", "X-Kind": " stats " },
    });
  },
};
"#;
    let n = differential(src, &["3", "0"], &["5", "-0", "12"]);
    assert_eq!(n, 5);
}

const ORDERS: &str = include_str!("../../../examples/js/orders.mjs");

/// `await request.json()` parsed in the sandbox and read field by field,
/// each read typed by the trace and guarded.
#[test]
fn parsed_json_is_read_as_quickjs_reads_it() {
    let order = |items: &[(&str, i64, i64)], member: bool| {
        let items: Vec<String> = items
            .iter()
            .map(|(sku, qty, cents)| format!(r#"{{"sku":"{sku}","qty":{qty},"cents":{cents}}}"#))
            .collect();
        format!(r#"{{"items":[{}],"member":{member}}}"#, items.join(","))
    };
    let training = [
        order(&[("a-1", 2, 300), ("b", 12, 999)], false),
        order(&[("c", 150, 5)], true),
        order(&[("d", 0, 5)], true),
    ];
    let checks = [
        order(&[], false),
        order(&[("x", 1, 1), ("y", 10, 10), ("z", 100, 100)], true),
        // Whitespace, escapes, a repeated key (the last counts), key order.
        " { \"member\" : false , \"items\" : [ { \"cents\":7, \"qty\":3, \"sku\":\"q\\\"\\u00e9\\ud83d\\ude00\\n\" , \"qty\": 4 } ] } ".to_string(),
        order(&[("neg", -3, 10)], false),
        // Fractions and exponents, read exactly by the runtime.
        r#"{"items":[{"sku":"a","qty":2,"cents":2.5},{"sku":"b","qty":1e1,"cents":-0.1E-2}],"member":true}"#.to_string(),
        r#"{"items":[{"sku":"a","qty":3,"cents":1.25e3}],"member":false}"#.to_string(),
    ];
    let training: Vec<&str> = training.iter().map(String::as_str).collect();
    let checks: Vec<&str> = checks.iter().map(String::as_str).collect();
    assert_eq!(differential(ORDERS, &training, &checks), 9);
}

/// What the compiled parser does not take leaves, and says so: malformed
/// text (QuickJS throws), deep nesting; and a read the trace typed
/// otherwise leaves where it is.
#[test]
fn json_the_compiled_parser_does_not_take_leaves() {
    let plan = Plan::new(ORDERS).unwrap();
    let traced = Interpreter::new(&plan.traced_source());
    let mut trace = plan.trace();
    for line in traced
        .run(r#"{"items":[{"sku":"a","qty":2,"cents":300}],"member":true}"#)
        .2
    {
        trace.merge_line(&line);
    }
    let wasm = plan.compile(&trace).unwrap();
    let engine = Engine::default();
    for (body, says) in [
        (r#"{"items":[],"member":true"#, "JSON"),
        (r#"{"items":[],"member":true} x"#, "JSON"),
        (r#"{"items":[01],"member":true}"#, "JSON"),
        (
            &format!(
                r#"{{"items":[],"member":true,"deep":{}{}}}"#,
                "[".repeat(100),
                "]".repeat(100)
            ),
            "JSON",
        ),
        (
            r#"{"items":[{"sku":7,"qty":2,"cents":300}],"member":true}"#,
            "a kind it never saw there, at 21:",
        ),
        (
            r#"{"items":{},"member":true}"#,
            "a kind it never saw there, at 7:",
        ),
    ] {
        let Ran::Left(at) = run_module(&engine, &wasm, body) else {
            panic!("{body} must leave")
        };
        assert!(
            plan.where_left(at).contains(says),
            "{body}: {}",
            plan.where_left(at)
        );
    }
}

/// At the runtime parser's depth limit the compiled code still answers:
/// 64 levels fit the runtime's stack in wasm.
#[test]
fn json_nested_to_the_limit_is_parsed_in_the_sandbox() {
    let src = r#"
export default {
  async fetch(request) {
    const o = await request.json();
    return new Response(String(o.n + 1));
  },
};
"#;
    let deep = |levels: usize| {
        format!(
            r#"{{"n":41,"deep":{}{}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    };
    // The object is one level; its `deep` field the rest, to 64 in all.
    let compiled = Compiled::new(src, &[r#"{"n":1}"#]);
    assert_eq!(
        compiled.check(&deep(63)),
        Ok(true),
        "63 arrays in the object"
    );
    assert_eq!(compiled.check(&deep(64)), Ok(false), "one past: leaves");
}

/// The compiled pipeline on random input (the runtime in wasm32, the
/// emitted code around it): numbers read from text, printed, divided and
/// truncated answer as QuickJS does, and only what compiled code does not
/// take leaves.
#[test]
fn numbers_from_random_text_answer_as_quickjs_does() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let src = r#"
export default {
  async fetch(request) {
    const t = await request.text();
    const x = Number(t);
    return new Response(`${x} ${String(x * 3)} ${x % 7} ${x | 0} ${t + "!"} ${t === "1"}`);
  },
};
"#;
    let compiled = Compiled::new(src, &["1.5", "abc", "12", "-0", "1e300", "1"]);
    let text = proptest::string::string_regex(
        "[ \t\n]{0,2}([+-]?[0-9]{0,22}(\\.[0-9]{0,22})?([eE][+-]?[0-9]{0,3})?|[+-]?Infinity|0[xob][0-9a-f]{1,8}|[ -~]{0,12})[ \t\n]{0,2}",
    )
    .unwrap();
    let left = std::cell::Cell::new(0);
    TestRunner::new(Config::with_cases(2_000))
        .run(&text, |body| {
            match compiled.check(&body) {
                Ok(true) => {}
                Ok(false) => left.set(left.get() + 1),
                Err(e) => prop_assert!(false, "{}", e),
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(left.get(), 0, "ASCII text never leaves");
}

/// JSON of random strings (any character, escaped) and numbers (any
/// double, as serde_json prints it), parsed by the compiled parser and
/// written back: each answer is QuickJS's to the unit.
#[test]
fn random_json_answers_as_quickjs_does() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let src = r#"
export default {
  async fetch(request) {
    const v = await request.json();
    return Response.json({ n: v.n * 2, s: v.s + "?", list: [v.n, 1], same: v.s === "a" });
  },
};
"#;
    let compiled = Compiled::new(
        src,
        &[r#"{"n": 3, "s": "a"}"#, r#" {"s":"x\n\u00e9","n":-5} "#],
    );
    let number = prop_oneof![
        any::<i32>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| serde_json::to_string(&x).unwrap()),
    ];
    let body = (number, any::<String>(), any::<bool>(), "[ \t\n]{0,2}").prop_map(
        |(n, s, order, space)| {
            // ASCII JSON (what the compiled tier reads): other characters
            // as `\u` escapes of their UTF-16 units.
            let s: String = serde_json::to_string(&s)
                .unwrap()
                .chars()
                .map(|c| match c {
                    ' '..='~' => c.to_string(),
                    c => c
                        .encode_utf16(&mut [0; 2])
                        .iter()
                        .map(|u| format!("\\u{u:04x}"))
                        .collect(),
                })
                .collect();
            let (a, b) = (format!("\"n\":{space}{n}"), format!("\"s\":{s}"));
            let (a, b) = if order { (a, b) } else { (b, a) };
            format!("{space}{{{a},{space}{b}}}{space}")
        },
    );
    let answered = std::cell::Cell::new(0);
    TestRunner::new(Config::with_cases(1_000))
        .run(&body, |body| {
            match compiled.check(&body) {
                Ok(true) => answered.set(answered.get() + 1),
                Ok(false) => {}
                Err(e) => prop_assert!(false, "{}", e),
            }
            Ok(())
        })
        .unwrap();
    // Only a body whose `n` is `null` (serde_json's NaN and infinities)
    // leaves: the trace saw numbers there.
    assert!(answered.get() > 900, "{} answered", answered.get());
}
