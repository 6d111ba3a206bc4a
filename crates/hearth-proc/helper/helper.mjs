// Hearth's Node.js handler. Started generic (no function) by the node's
// zygote inside a lean container, with its connection to the node on fd 3.
// The first `load` message names the function's code (bound at /code after
// this process started); each `invoke` runs the handler once.
//
// Frames (both ways): u32 header length, u32 body length (big endian), a
// JSON header, the raw body. Host calls (KV, outbound HTTP) go to the node
// as `call` frames and block this handler until the `result` arrives.

import fs from "node:fs";
import Module from "node:module";
import net from "node:net";
import path from "node:path";
import { Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import vm from "node:vm";

// How functions are found and called and the events they get: shared with
// the js tier's prelude (hearth-host's shapes.js), evaluated before any
// function's code.
const shapes = vm.runInThisContext(fs.readFileSync(new URL("./shapes.js", import.meta.url), "utf8"), {
  filename: "hearth:shapes.js",
});

const sock = new net.Socket({ fd: 3, readable: true, writable: true });
let buffered = Buffer.alloc(0);
const waiting = [];
const queued = [];

sock.on("data", (chunk) => {
  buffered = Buffer.concat([buffered, chunk]);
  for (;;) {
    if (buffered.length < 8) return;
    const hlen = buffered.readUInt32BE(0);
    const blen = buffered.readUInt32BE(4);
    if (buffered.length < 8 + hlen + blen) return;
    const header = hlen ? JSON.parse(buffered.subarray(8, 8 + hlen).toString()) : {};
    const body = Buffer.from(buffered.subarray(8 + hlen, 8 + hlen + blen));
    buffered = buffered.subarray(8 + hlen + blen);
    const frame = { header, body };
    if (waiting.length) waiting.shift()(frame);
    else queued.push(frame);
  }
});
sock.on("end", () => process.exit(0));
sock.on("error", () => process.exit(0));

function recv() {
  return queued.length ? Promise.resolve(queued.shift()) : new Promise((r) => waiting.push(r));
}

// Sends a frame; false when the socket's buffer is full (wait for "drain").
function send(header, body = Buffer.alloc(0)) {
  const h = Buffer.from(JSON.stringify(header));
  const head = Buffer.alloc(8);
  head.writeUInt32BE(h.length, 0);
  head.writeUInt32BE(body.length, 4);
  return sock.write(Buffer.concat([head, h, body]));
}

// One host call at a time, in order: the tape (a later issue) relies on it.
let chain = Promise.resolve();
function call(header, body = Buffer.alloc(0)) {
  const run = async () => {
    send({ ...header, op: "call" }, body);
    const reply = await recv();
    if (reply.header.error) throw new HostError(reply.header.error);
    return reply;
  };
  const p = chain.then(run, run);
  chain = p.catch(() => {});
  return p;
}

class HostError extends Error {
  constructor(message) {
    super(message);
    this.name = "HostError";
  }
}

const toBytes = (v) => (typeof v === "string" ? Buffer.from(v) : Buffer.from(v ?? []));
const hex = (v) => toBytes(v).toString("hex");

function log(stream, level, args) {
  const text = args
    .map((a) => (typeof a === "string" ? a : a instanceof Error ? a.stack : JSON.stringify(a)))
    .join(" ");
  send({ op: "log", stream, level }, Buffer.from(text));
}

const hearth = {
  HostError,
  kv: {
    async get(key) {
      const r = await call({ call: "kv_get", key: hex(key) });
      return r.header.found ? r.body.toString() : null;
    },
    async getBytes(key) {
      const r = await call({ call: "kv_get", key: hex(key) });
      return r.header.found ? new Uint8Array(r.body) : null;
    },
    async set(key, value) {
      await call({ call: "kv_set", key: hex(key) }, toBytes(value));
    },
    async delete(key) {
      return !!(await call({ call: "kv_delete", key: hex(key) })).header.existed;
    },
    async list(prefix = "") {
      const r = await call({ call: "kv_list", prefix: hex(prefix) });
      return r.header.keys.map((k) => Buffer.from(k, "hex").toString());
    },
  },
  async fetch(input, init = {}) {
    const req = new Request(input, init);
    const body = req.body ? Buffer.from(await req.arrayBuffer()) : Buffer.alloc(0);
    const r = await call(
      { call: "http_fetch", url: req.url, method: req.method, headers: [...req.headers] },
      body,
    );
    return new Response(r.body.length ? r.body : null, {
      status: r.header.status,
      headers: r.header.headers,
    });
  },
  log: (message, level = "info") => log("log", level, [message]),
  // Work after the response: the invocation answers, then runs on until
  // every promise passed here settles (within its timeout).
  waitUntil(promise) {
    passed.push(Promise.resolve(promise));
  },
};
// What the invocation passed to waitUntil, in order.
let passed = [];
const workersCtx = { waitUntil: hearth.waitUntil, passThroughOnException() {} };
globalThis.hearth = hearth;
// Outbound HTTP always goes through the node (its allow-list applies).
globalThis.fetch = hearth.fetch;
console.log = console.info = (...a) => log("log", "info", a);
console.debug = (...a) => log("log", "debug", a);
console.warn = (...a) => log("stderr", "warn", a);
console.error = (...a) => log("stderr", "error", a);

let fn = null;
let loadError = null;

async function load(msg) {
  for (const k of Object.keys(process.env)) delete process.env[k];
  Object.assign(process.env, msg.env || {});
  const file = path.join(msg.code, msg.entry);
  try {
    process.chdir(scratchCwd(msg.code, msg.workdir));
    let ns;
    let scopeMain;
    if (isCommonJs(file, msg.code)) [ns, scopeMain] = loadCommonJs(file);
    else ns = await import(pathToFileURL(file).href);
    fn = shapes.pick(ns, msg.handler, scopeMain);
    if (!fn && msg.handler) loadError = `${msg.entry} exports no function ${msg.handler} (the function's handler setting)`;
    else if (!fn) loadError = `${msg.entry} exports neither default { fetch }, handler nor main`;
  } catch (e) {
    loadError = e && e.stack ? e.stack : String(e);
  }
}

// Node's own rule (extension, then the nearest package.json's "type"),
// and a .js file that does not parse as CommonJS is an ES module, as
// Node's syntax detection decides.
function isCommonJs(file, root) {
  if (file.endsWith(".cjs")) return true;
  if (file.endsWith(".mjs")) return false;
  for (let dir = path.dirname(file); dir.startsWith(root); dir = path.dirname(dir)) {
    try {
      const type = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).type;
      if (type === "module") return false;
      break;
    } catch {}
    if (dir === root) break;
  }
  try {
    vm.compileFunction(fs.readFileSync(file, "utf8"), ["exports", "require", "module", "__filename", "__dirname"]);
    return true;
  } catch {
    return false;
  }
}

// Loads a CommonJS entry as require() would, also returning the `main` it
// declares at top level: OpenWhisk's documentation writes actions as a
// script with `function main(params)` and no export.
function loadCommonJs(file) {
  const m = new Module(file, null);
  m.filename = file;
  m.paths = Module._nodeModulePaths(path.dirname(file));
  Module._cache[file] = m;
  const source = fs.readFileSync(file, "utf8");
  const main = m._compile(`${source}\n;return typeof main === "function" ? main : undefined;`, file);
  m.loaded = true;
  return [{ default: m.exports }, typeof main === "function" ? main : undefined];
}

// The handler's working directory: `work` (the node sends it when the
// sandbox has a /tmp of its own), writable, with the code's files in it
// (OpenWhisk and most containers let a function write next to its code;
// code written for Lambda writes to /tmp, which works too). The code stays
// read-only: `work` holds symbolic links to it.
function scratchCwd(code, work) {
  if (!work) return code;
  fs.mkdirSync(work, { mode: 0o755 });
  for (const name of fs.readdirSync(code)) fs.symlinkSync(path.join(code, name), path.join(work, name));
  return work;
}

// The body as the shapes take it: text, or base64 when not UTF-8.
function bodyText(body) {
  const text = body.toString();
  return Buffer.from(text).equals(body) ? [text, false] : [body.toString("base64"), true];
}

async function toResult(result) {
  if (result instanceof Response) {
    return { status: result.status, headers: [...result.headers], body: Buffer.from(await result.arrayBuffer()) };
  }
  if (result && typeof result === "object" && (result.statusCode !== undefined || result.body !== undefined)) {
    const headers = Object.entries(result.headers || {}).map(([k, v]) => [k, String(v)]);
    let body = result.body ?? "";
    if (typeof body === "object" && !Buffer.isBuffer(body)) {
      body = JSON.stringify(body);
      if (!headers.some(([k]) => k.toLowerCase() === "content-type")) headers.push(["content-type", "application/json"]);
    }
    body = result.isBase64Encoded ? Buffer.from(body, "base64") : toBytes(body);
    return { status: result.statusCode ?? 200, headers, body };
  }
  if (result === undefined || result === null) return { status: 204, headers: [], body: Buffer.alloc(0) };
  if (typeof result === "string") return { status: 200, headers: [["content-type", "text/plain; charset=utf-8"]], body: Buffer.from(result) };
  return { status: 200, headers: [["content-type", "application/json"]], body: Buffer.from(JSON.stringify(result)) };
}

// Nondeterminism through the host, so it is taped: during an invocation
// Date.now() / new Date() read the invocation's start time from the host
// (frozen, as in Cloudflare Workers) and Math.random() runs from a seed
// the host drew. Not covered: crypto.*, performance.now(), process.hrtime
// (docs/recording.md).
const RealDate = Date;
let frozenMs = null;
class TapedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0 && frozenMs !== null) super(frozenMs);
    else super(...args);
  }
  static now() {
    return frozenMs ?? RealDate.now();
  }
}
globalThis.Date = TapedDate;
const realRandom = Math.random;
const seed = new Uint32Array(4);
let seeded = false;
function xoshiro128ss() {
  const r = Math.imul(rotl(Math.imul(seed[1], 5), 7), 9) >>> 0;
  const t = seed[1] << 9;
  seed[2] ^= seed[0]; seed[3] ^= seed[1]; seed[1] ^= seed[2]; seed[0] ^= seed[3];
  seed[2] ^= t; seed[3] = rotl(seed[3], 11);
  return r;
}
function rotl(x, k) { return ((x << k) | (x >>> (32 - k))) >>> 0; }
Math.random = () => (seeded ? ((xoshiro128ss() >>> 5) * 67108864 + (xoshiro128ss() >>> 6)) / 9007199254740992 : realRandom());

// The start time comes with the invocation (`wall_ms`: the node read its
// taped clock before sending it), so it costs no round trip.
async function fromHost(msg) {
  frozenMs = msg.wall_ms;
  const bytes = (await call({ call: "random", n: 16 })).body;
  for (let i = 0; i < 4; i++) seed[i] = bytes.readUInt32LE(i * 4);
  if (seed.every((x) => x === 0)) seed[0] = 1;
  seeded = true;
}

async function invoke(msg, body) {
  try {
    await fromHost(msg);
    await invokeHandler(msg, body);
  } finally {
    frozenMs = null;
    seeded = false;
  }
}

// Lambda response streaming (`awslambda.streamifyResponse`), as Lambda's
// Node.js runtime offers it: the handler gets (event, responseStream,
// context) and writes its body to the stream; HttpResponseStream.from
// gives it a status and headers first. A streaming invocation (the
// function deployed with `stream`) sends the head, then chunks of at most
// 64 KiB as they are written, each write waiting while the node has no
// room; any other gets the body whole.
const STREAMING = Symbol.for("aws.lambda.runtime.handler.streaming");
const PIECE = 64 << 10;
class ResponseStream extends Writable {
  #meta = {};
  #contentType = "application/octet-stream";
  #streaming;
  #headSent = false;
  #chunks = [];
  constructor(streaming) {
    super();
    this.#streaming = streaming;
  }
  setContentType(type) { this.#contentType = String(type); }
  _setMetadata(meta) {
    if (this.#headSent) throw new Error("the response's status and headers were already sent");
    this.#meta = meta || {};
  }
  head() {
    const headers = Object.entries(this.#meta.headers || {}).map(([k, v]) => [k, String(v)]);
    if (!headers.some(([k]) => k.toLowerCase() === "content-type")) headers.push(["content-type", this.#contentType]);
    return { status: this.#meta.statusCode ?? 200, headers };
  }
  #sendHead() {
    if (!this.#headSent) { this.#headSent = true; send({ op: "head", ...this.head() }); }
  }
  _write(chunk, encoding, done) {
    const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, encoding);
    if (!this.#streaming) { this.#chunks.push(bytes); return done(); }
    this.#sendHead();
    let room = true;
    for (let at = 0; at < bytes.length; at += PIECE) room = send({ op: "chunk" }, bytes.subarray(at, at + PIECE));
    if (room) done(); else sock.once("drain", () => done());
  }
  // After the handler: the end of a streamed answer, or the whole one.
  finish() {
    if (!this.#streaming) return { ...this.head(), body: Buffer.concat(this.#chunks) };
    this.#sendHead();
    send({ op: "end" });
    return null;
  }
}
globalThis.awslambda = {
  streamifyResponse(handler) {
    handler[STREAMING] = "response";
    return handler;
  },
  HttpResponseStream: {
    from(stream, metadata) {
      stream._setMetadata(metadata);
      return stream;
    },
  },
};

// Settles what the invocation passed to waitUntil (and what that work
// passes in turn); a promise that rejects is logged.
async function settleWaiting() {
  for (let i = 0; i < passed.length; i++) {
    try {
      await passed[i];
    } catch (e) {
      log("stderr", "error", [`a promise passed to waitUntil rejected: ${e && e.stack ? e.stack : String(e)}`]);
    }
  }
  passed = [];
}

// Sends the whole response: at once, or, with work after it, marked so
// the node answers the caller while the work runs, then `done`.
async function respond(status, headers, body) {
  if (passed.length === 0) {
    send({ op: "response", status, headers }, body);
    return;
  }
  send({ op: "response", status, headers, after: true }, body);
  await settleWaiting();
  send({ op: "done" });
}

async function invokeHandler(msg, body) {
  passed = [];
  if (loadError) {
    log("stderr", "error", [loadError]);
    send({ op: "error", message: loadError.split("\n")[0] });
    return;
  }
  const url = new URL(`http://function${msg.path}${msg.query ? "?" + msg.query : ""}`);
  try {
    let result;
    if (fn.shape === "lambda" && fn.f[STREAMING] === "response") {
      const stream = new ResponseStream(!!msg.streaming);
      await shapes.call(fn, msg, ...bodyText(body), frozenMs, () => RealDate.now(), stream);
      if (!stream.writableEnded) stream.end();
      if (!stream.writableFinished) await new Promise((resolve, reject) => { stream.once("finish", resolve); stream.once("error", reject); });
      // A streamed body ends with the invocation: its work after the
      // response runs first.
      if (msg.streaming) await settleWaiting();
      const whole = stream.finish();
      if (whole) await respond(whole.status, whole.headers, whole.body);
      return;
    }
    if (fn.shape === "workers" && shapes.isScheduled(msg)) {
      const event = JSON.parse(bodyText(body)[0]);
      result = await shapes.runScheduled(fn, event, { ...process.env, hearth }, workersCtx);
    } else if (fn.shape === "workers") {
      const init = { method: msg.method, headers: msg.headers };
      if (!["GET", "HEAD"].includes(msg.method)) init.body = body;
      result = await fn.f(new Request(url, init), { ...process.env, hearth }, workersCtx);
    } else {
      result = await shapes.call(fn, msg, ...bodyText(body), frozenMs, () => RealDate.now());
    }
    const r = await toResult(result);
    await respond(r.status, r.headers, r.body);
  } catch (e) {
    const text = e && e.stack ? e.stack : String(e);
    log("stderr", "error", [text]);
    // Its work after the response still runs (as in Workers) before the
    // error ends the exchange.
    await settleWaiting();
    send({ op: "error", message: text.split("\n")[0] });
  }
}

process.on("uncaughtException", (e) => {
  log("stderr", "error", [e && e.stack ? e.stack : String(e)]);
});

for (;;) {
  const { header, body } = await recv();
  if (header.op === "load") {
    await load(header);
    send({ op: "loaded", error: loadError });
  } else if (header.op === "invoke") {
    await invoke(header, body);
  }
}
