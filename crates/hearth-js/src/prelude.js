// The js tier's world: the web APIs functions use, `hearth`, CommonJS
// `require`, and the invocation driver. Evaluated once per isolate, before
// the function's code. Everything nondeterministic (clocks, randomness, KV,
// outbound HTTP) goes through `__hearth`, the host bridge, so it is taped.
//
// The shapes (event, context, results) mirror the process tier's Node.js
// helper (crates/hearth-proc/helper/helper.mjs) exactly: a function that
// falls back to Node.js must answer the same.
"use strict";
(() => {
  const H = globalThis.__hearth;
  delete globalThis.__hearth;
  const unsupported = (what) => H.unsupported(what);

  // ---------------------------------------------------------- text, base64
  class TextEncoder {
    get encoding() { return "utf-8"; }
    encode(s = "") { return H.encode(String(s)); }
  }
  class TextDecoder {
    constructor(label = "utf-8") {
      if (!/^utf-?8$/i.test(label)) throw new RangeError(`TextDecoder: only utf-8 is supported, not ${label}`);
    }
    get encoding() { return "utf-8"; }
    decode(b) {
      if (b === undefined) return "";
      return H.decode(toBytes(b));
    }
  }
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  function btoa(s) {
    s = String(s);
    let out = "";
    for (let i = 0; i < s.length; i += 3) {
      const a = s.charCodeAt(i), b = s.charCodeAt(i + 1), c = s.charCodeAt(i + 2);
      if (a > 255 || b > 255 || c > 255) throw new Error("btoa: character out of range");
      const n = (a << 16) | ((b || 0) << 8) | (c || 0);
      out += B64[n >> 18] + B64[(n >> 12) & 63] + (i + 1 < s.length ? B64[(n >> 6) & 63] : "=") + (i + 2 < s.length ? B64[n & 63] : "=");
    }
    return out;
  }
  function atob(s) {
    s = String(s).replace(/[\t\n\f\r ]/g, "").replace(/=+$/, "");
    let out = "", bits = 0, acc = 0;
    for (const ch of s) {
      const v = B64.indexOf(ch);
      if (v < 0) throw new Error("atob: invalid character");
      acc = (acc << 6) | v; bits += 6;
      if (bits >= 8) { bits -= 8; out += String.fromCharCode((acc >> bits) & 255); }
    }
    return out;
  }
  function toBytes(v) {
    if (v instanceof Uint8Array) return v;
    if (v instanceof ArrayBuffer) return new Uint8Array(v);
    if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
    if (v === null || v === undefined) return new Uint8Array(0);
    return H.encode(String(v));
  }

  // ---------------------------------------------------------- URL
  // The WHATWG URL Standard from the `url` crate (isolate/url.rs): parsing,
  // setters and form encoding happen there; these classes keep the shape.
  // A URL holds its components in the order the bridge gives them.
  const PART = Object.fromEntries(H.urlParts.map((name, i) => [name, i]));
  class URLSearchParams {
    #list = [];
    #url = null;
    constructor(init = "") {
      if (init instanceof URLSearchParams) this.#list = init.#list.map((p) => [...p]);
      else if (init && typeof init === "object" && typeof init[Symbol.iterator] === "function") {
        for (const pair of init) {
          const p = [...pair];
          if (p.length !== 2) throw new TypeError("URLSearchParams: each pair must have two items");
          this.#list.push([String(p[0]), String(p[1])]);
        }
      } else if (init && typeof init === "object") for (const k of Object.keys(init)) this.#list.push([k, String(init[k])]);
      else this.#parse(String(init));
    }
    #parse(s) { this.#list = H.formParse(s.startsWith("?") ? s.slice(1) : s); }
    // A URL's own params: changed when its search is, and change it.
    static _of(url, search) { const p = new URLSearchParams(search); p.#url = url; return p; }
    _reset(search) { this.#parse(search); }
    #update() { if (this.#url) this.#url._setQuery(this.toString()); }
    get size() { return this.#list.length; }
    append(k, v) { this.#list.push([String(k), String(v)]); this.#update(); }
    delete(k, v) {
      k = String(k);
      this.#list = this.#list.filter(([n, x]) => n !== k || (v !== undefined && x !== String(v)));
      this.#update();
    }
    get(k) { k = String(k); const e = this.#list.find(([n]) => n === k); return e ? e[1] : null; }
    getAll(k) { k = String(k); return this.#list.filter(([n]) => n === k).map(([, v]) => v); }
    has(k, v) { k = String(k); return this.#list.some(([n, x]) => n === k && (v === undefined || x === String(v))); }
    set(k, v) {
      k = String(k); v = String(v);
      const i = this.#list.findIndex(([n]) => n === k);
      if (i < 0) this.#list.push([k, v]);
      else { this.#list[i][1] = v; this.#list = this.#list.filter(([n], j) => n !== k || j === i); }
      this.#update();
    }
    // Stable, by UTF-16 code units, as the standard says.
    sort() { this.#list = this.#list.map((p, i) => [p, i]).sort(([a, i], [b, j]) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : i - j)).map(([p]) => p); this.#update(); }
    forEach(f, self) { for (const [k, v] of this.#list) f.call(self, v, k, this); }
    *entries() { for (const p of this.#list) yield [p[0], p[1]]; }
    *keys() { for (const p of this.#list) yield p[0]; }
    *values() { for (const p of this.#list) yield p[1]; }
    [Symbol.iterator]() { return this.entries(); }
    toString() { return H.formSerialize(this.#list); }
  }

  // The bridge's parse: the URL's components, or null when it is not one.
  const parseURL = (input, base) => (base === undefined ? H.urlParse(String(input)) : H.urlParse(String(input), String(base)));
  class URL {
    #p;
    #params = null;
    constructor(input, base) {
      const p = parseURL(input, base);
      if (!p) throw new TypeError(`Invalid URL: ${input}${base === undefined ? "" : ` against ${base}`}`);
      this.#p = p;
    }
    #set(field, value) {
      const p = H.urlSet(this.#p[0], field, String(value));
      if (!p) throw new TypeError(`Invalid URL: ${value}`);
      this.#p = p;
      if (this.#params && (field === "href" || field === "search")) this.#params._reset(this.#p[PART.search]);
    }
    // From searchParams: its serialization is the new query.
    _setQuery(s) { this.#p = H.urlSet(this.#p[0], "search", s) || this.#p; }
    get href() { return this.#p[PART.href]; }
    set href(v) { this.#set("href", v); }
    get origin() { return this.#p[PART.origin]; }
    get protocol() { return this.#p[PART.protocol]; }
    set protocol(v) { this.#set("protocol", v); }
    get username() { return this.#p[PART.username]; }
    set username(v) { this.#set("username", v); }
    get password() { return this.#p[PART.password]; }
    set password(v) { this.#set("password", v); }
    get host() { return this.#p[PART.host]; }
    set host(v) { this.#set("host", v); }
    get hostname() { return this.#p[PART.hostname]; }
    set hostname(v) { this.#set("hostname", v); }
    get port() { return this.#p[PART.port]; }
    set port(v) { this.#set("port", v); }
    get pathname() { return this.#p[PART.pathname]; }
    set pathname(v) { this.#set("pathname", v); }
    get search() { return this.#p[PART.search]; }
    set search(v) { this.#set("search", v); }
    get searchParams() { return (this.#params ??= URLSearchParams._of(this, this.#p[PART.search])); }
    get hash() { return this.#p[PART.hash]; }
    set hash(v) { this.#set("hash", v); }
    toString() { return this.href; }
    toJSON() { return this.href; }
    static canParse(u, b) { return !!parseURL(u, b); }
    static parse(u, b) { try { return new URL(u, b); } catch { return null; } }
  }

  // ---------------------------------------------------------- fetch types
  class Headers {
    #map = new Map();
    constructor(init) {
      if (init instanceof Headers) for (const [k, v] of init) this.append(k, v);
      else if (Array.isArray(init)) for (const [k, v] of init) this.append(k, v);
      else if (init && typeof init === "object") for (const k of Object.keys(init)) this.append(k, init[k]);
    }
    append(k, v) {
      k = String(k).toLowerCase(); v = String(v).trim();
      const cur = this.#map.get(k);
      if (cur) cur.push(v); else this.#map.set(k, [v]);
    }
    set(k, v) { this.#map.set(String(k).toLowerCase(), [String(v).trim()]); }
    get(k) { const v = this.#map.get(String(k).toLowerCase()); return v ? v.join(", ") : null; }
    getSetCookie() { return this.#map.get("set-cookie")?.slice() ?? []; }
    has(k) { return this.#map.has(String(k).toLowerCase()); }
    delete(k) { this.#map.delete(String(k).toLowerCase()); }
    forEach(f, self) { for (const [k, v] of this) f.call(self, v, k, this); }
    *entries() {
      for (const k of [...this.#map.keys()].sort()) {
        if (k === "set-cookie") for (const v of this.#map.get(k)) yield [k, v];
        else yield [k, this.#map.get(k).join(", ")];
      }
    }
    *keys() { for (const [k] of this.entries()) yield k; }
    *values() { for (const [, v] of this.entries()) yield v; }
    [Symbol.iterator]() { return this.entries(); }
  }

  // ---------------------------------------------------------- streams
  // WHATWG ReadableStream's default (non-byte) stream: an underlying source
  // (start, pull, cancel), a queue up to its high-water mark, one reader at
  // a time, async iteration. Enough for Response bodies written as they
  // are made and for reading a streamed request; pipes, tee and byte
  // streams are unsupported (they fall back to Node.js).
  class ReadableStreamDefaultController {
    #s;
    constructor(s) { this.#s = s; }
    get desiredSize() { return this.#s._desired(); }
    enqueue(chunk) { this.#s._enqueue(chunk); }
    close() { this.#s._close(); }
    error(e) { this.#s._error(e); }
  }
  class ReadableStreamDefaultReader {
    #s;
    constructor(s) {
      if (s._reader) throw new TypeError("ReadableStream is locked to a reader");
      this.#s = s;
      s._reader = this;
    }
    read() { return this.#s ? this.#s._read() : Promise.reject(new TypeError("the reader was released")); }
    cancel(reason) { return this.#s ? this.#s._cancel(reason) : Promise.reject(new TypeError("the reader was released")); }
    releaseLock() { if (this.#s) { this.#s._reader = null; this.#s = null; } }
  }
  class ReadableStream {
    #queue = []; #reads = []; #state = "readable"; #error; #closing = false;
    #source; #controller; #hwm; #started = false; #pulling = false; #again = false;
    _reader = null;
    constructor(source = {}, strategy = {}) {
      if (source.type === "bytes") unsupported("ReadableStream of type bytes");
      this.#source = source;
      this.#hwm = strategy.highWaterMark ?? 1;
      this.#controller = new ReadableStreamDefaultController(this);
      const started = source.start ? source.start(this.#controller) : undefined;
      Promise.resolve(started).then(() => { this.#started = true; this.#pull(); }, (e) => this._error(e));
    }
    get locked() { return this._reader !== null; }
    getReader(options) {
      if (options && options.mode) unsupported(`ReadableStream.getReader({ mode: ${options.mode} })`);
      return new ReadableStreamDefaultReader(this);
    }
    cancel(reason) { return this.locked ? Promise.reject(new TypeError("ReadableStream is locked")) : this._cancel(reason); }
    pipeTo() { unsupported("ReadableStream.pipeTo"); }
    pipeThrough() { unsupported("ReadableStream.pipeThrough"); }
    tee() { unsupported("ReadableStream.tee"); }
    async *values() {
      const reader = this.getReader();
      try {
        for (;;) { const { value, done } = await reader.read(); if (done) return; yield value; }
      } finally { reader.releaseLock(); }
    }
    [Symbol.asyncIterator]() { return this.values(); }
    static from(items) {
      const it = items[Symbol.asyncIterator] ? items[Symbol.asyncIterator]() : items[Symbol.iterator]();
      return new ReadableStream({ async pull(c) { const { value, done } = await it.next(); if (done) c.close(); else c.enqueue(value); } }, { highWaterMark: 0 });
    }
    _desired() { return this.#state === "errored" ? null : this.#state === "closed" ? 0 : this.#hwm - this.#queue.length; }
    _enqueue(chunk) {
      if (this.#state !== "readable" || this.#closing) throw new TypeError("ReadableStream: enqueue after close");
      if (this.#reads.length) this.#reads.shift().resolve({ value: chunk, done: false });
      else this.#queue.push(chunk);
      this.#pull();
    }
    _close() {
      if (this.#state !== "readable" || this.#closing) throw new TypeError("ReadableStream: already closed");
      this.#closing = true;
      if (this.#queue.length === 0) this.#finish();
    }
    _error(e) {
      if (this.#state !== "readable") return;
      this.#state = "errored"; this.#error = e; this.#queue = [];
      for (const r of this.#reads.splice(0)) r.reject(e);
    }
    _read() {
      if (this.#queue.length) {
        const value = this.#queue.shift();
        if (this.#closing && this.#queue.length === 0) this.#finish(); else this.#pull();
        return Promise.resolve({ value, done: false });
      }
      if (this.#state === "closed") return Promise.resolve({ value: undefined, done: true });
      if (this.#state === "errored") return Promise.reject(this.#error);
      return new Promise((resolve, reject) => { this.#reads.push({ resolve, reject }); this.#pull(); });
    }
    _cancel(reason) {
      if (this.#state === "closed") return Promise.resolve();
      if (this.#state === "errored") return Promise.reject(this.#error);
      this.#queue = [];
      this.#finish();
      return Promise.resolve(this.#source.cancel ? this.#source.cancel(reason) : undefined).then(() => undefined);
    }
    #finish() {
      this.#state = "closed";
      for (const r of this.#reads.splice(0)) r.resolve({ value: undefined, done: true });
    }
    // Asks the source for more while the queue is under its mark or a read
    // waits; one pull at a time.
    #pull() {
      if (!this.#started || this.#state !== "readable" || this.#closing || !this.#source.pull) return;
      if (this.#queue.length >= this.#hwm && this.#reads.length === 0) return;
      if (this.#pulling) { this.#again = true; return; }
      this.#pulling = true;
      Promise.resolve()
        .then(() => this.#source.pull(this.#controller))
        .then(() => { this.#pulling = false; if (this.#again) { this.#again = false; this.#pull(); } }, (e) => this._error(e));
    }
  }
  // WHATWG WritableStream (a sink's start/write/close/abort, writes in
  // order, one writer) and TransformStream (a transformer's transform and
  // flush, identity without one), the Workers way of writing a streamed
  // response from code that runs after the handler returned.
  class WritableStreamDefaultWriter {
    #s;
    constructor(s) {
      if (s._writer) throw new TypeError("WritableStream is locked to a writer");
      this.#s = s;
      s._writer = this;
    }
    get ready() { return this.#s ? this.#s._ready() : Promise.reject(new TypeError("the writer was released")); }
    get desiredSize() { return this.#s ? this.#s._desired() : null; }
    write(chunk) { return this.#s ? this.#s._write(chunk) : Promise.reject(new TypeError("the writer was released")); }
    close() { return this.#s ? this.#s._close() : Promise.reject(new TypeError("the writer was released")); }
    abort(reason) { return this.#s ? this.#s._abort(reason) : Promise.reject(new TypeError("the writer was released")); }
    releaseLock() { if (this.#s) { this.#s._writer = null; this.#s = null; } }
  }
  class WritableStream {
    #sink; #state = "writable"; #error; #pending = 0; #last;
    _writer = null;
    constructor(sink = {}) {
      this.#sink = sink;
      const controller = { error: (e) => this.#fail(e) };
      this.#last = Promise.resolve(sink.start ? sink.start(controller) : undefined);
    }
    get locked() { return this._writer !== null; }
    getWriter() { return new WritableStreamDefaultWriter(this); }
    close() { return this.locked ? Promise.reject(new TypeError("WritableStream is locked")) : this._close(); }
    abort(reason) { return this.locked ? Promise.reject(new TypeError("WritableStream is locked")) : this._abort(reason); }
    _desired() { return this.#state === "writable" ? 1 - this.#pending : this.#state === "closed" ? 0 : null; }
    _ready() { return this.#last.then(() => undefined); }
    #fail(e) { if (this.#state === "writable" || this.#state === "closing") { this.#state = "errored"; this.#error = e; } }
    // Runs `step` after every earlier write, in order.
    #then(step) {
      this.#pending += 1;
      const run = this.#last.then(() => {
        if (this.#state === "errored") throw this.#error;
        return step();
      });
      this.#last = run.then(() => { this.#pending -= 1; }, (e) => { this.#pending -= 1; this.#fail(e); });
      return run;
    }
    _write(chunk) {
      if (this.#state !== "writable") return Promise.reject(this.#error ?? new TypeError("the WritableStream is closed"));
      return this.#then(() => (this.#sink.write ? this.#sink.write(chunk) : undefined));
    }
    _close() {
      if (this.#state !== "writable") return Promise.reject(this.#error ?? new TypeError("the WritableStream is closed"));
      this.#state = "closing";
      return this.#then(async () => { if (this.#sink.close) await this.#sink.close(); this.#state = "closed"; });
    }
    _abort(reason) {
      this.#fail(reason);
      return Promise.resolve(this.#sink.abort ? this.#sink.abort(reason) : undefined).then(() => undefined);
    }
  }
  class TransformStream {
    constructor(transformer = {}) {
      let readable;
      // A write waits until the reader has taken what came before it.
      let room = null;
      this.readable = new ReadableStream({
        start(c) { readable = c; },
        pull() { if (room) { const r = room; room = null; r(); } },
      });
      const controller = {
        enqueue: (chunk) => readable.enqueue(chunk),
        error: (e) => readable.error(e),
        terminate: () => readable.close(),
        get desiredSize() { return readable.desiredSize; },
      };
      this.writable = new WritableStream({
        async write(chunk) {
          if (readable.desiredSize <= 0) await new Promise((r) => { room = r; });
          if (transformer.transform) await transformer.transform(chunk, controller);
          else controller.enqueue(chunk);
        },
        async close() {
          if (transformer.flush) await transformer.flush(controller);
          readable.close();
        },
        abort(reason) { readable.error(reason); },
      });
    }
  }

  // Every chunk of `stream`, concatenated.
  async function readAll(stream) {
    const parts = [];
    let n = 0;
    for await (const chunk of stream) {
      const b = toBytes(chunk);
      parts.push(b);
      n += b.byteLength;
    }
    const out = new Uint8Array(n);
    let at = 0;
    for (const b of parts) { out.set(b, at); at += b.byteLength; }
    return out;
  }

  function bodyBytes(body, headers) {
    if (body === null || body === undefined) return null;
    if (typeof body === "string") {
      if (headers && !headers.has("content-type")) headers.set("content-type", "text/plain;charset=UTF-8");
      return H.encode(body);
    }
    if (body instanceof URLSearchParams) {
      if (headers && !headers.has("content-type")) headers.set("content-type", "application/x-www-form-urlencoded;charset=UTF-8");
      return H.encode(body.toString());
    }
    if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return toBytes(body).slice();
    if (body instanceof Body) return body._bytes;
    return H.encode(String(body));
  }
  class Body {
    _bytes = null;
    // A body given as a ReadableStream (then `_bytes` is null).
    _stream = null;
    bodyUsed = false;
    get body() {
      if (this._stream) return this._stream;
      if (this._bytes === null) return null;
      const bytes = this._bytes;
      this._stream = new ReadableStream({ start(c) { c.enqueue(bytes); c.close(); } });
      this._bytes = null;
      return this._stream;
    }
    _setBody(body, headers) {
      if (body instanceof ReadableStream) this._stream = body;
      else this._bytes = bodyBytes(body, headers);
    }
    #take() {
      if (this.bodyUsed) return Promise.reject(new TypeError("Body has already been consumed"));
      this.bodyUsed = true;
      if (this._stream) return readAll(this._stream);
      return Promise.resolve(this._bytes ?? new Uint8Array(0));
    }
    async arrayBuffer() { const b = await this.#take(); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); }
    async bytes() { return (await this.#take()).slice(); }
    async text() { return H.decode(await this.#take()); }
    async json() { return JSON.parse(await this.text()); }
    async formData() { unsupported("Body.formData()"); }
    async blob() { unsupported("Body.blob()"); }
  }
  class Request extends Body {
    constructor(input, init = {}) {
      super();
      if (input instanceof Request) {
        if (input._stream) unsupported("a Request made from a Request with a streamed body");
        this.url = input.url; this.method = input.method; this.headers = new Headers(input.headers);
        this._bytes = input._bytes; this.signal = input.signal;
      } else {
        this.url = new URL(String(input)).href; this.method = "GET"; this.headers = new Headers();
      }
      if (init.method) this.method = String(init.method).toUpperCase();
      if (init.headers) this.headers = new Headers(init.headers);
      if (init.body !== undefined && init.body !== null) {
        if (this.method === "GET" || this.method === "HEAD") throw new TypeError("Request with GET/HEAD method cannot have body");
        this._setBody(init.body, this.headers);
      }
      this.redirect = init.redirect ?? "follow";
      this.signal = init.signal ?? this.signal ?? null;
    }
    clone() { return new Request(this); }
  }
  class Response extends Body {
    constructor(body = null, init = {}) {
      super();
      this.status = init.status ?? 200;
      if (this.status < 200 || this.status > 599) throw new RangeError(`Response status ${this.status} is out of range`);
      this.statusText = init.statusText ?? "";
      this.headers = new Headers(init.headers);
      this._setBody(body, this.headers);
      this.type = "default";
      this.url = init.url ?? "";
      this.redirected = false;
    }
    get ok() { return this.status >= 200 && this.status < 300; }
    clone() {
      if (this._stream) unsupported("Response.clone() of a streamed body");
      return new Response(this._bytes ? this._bytes.slice() : null, this);
    }
    static json(data, init = {}) {
      const headers = new Headers(init.headers);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
      return new Response(JSON.stringify(data), { ...init, headers });
    }
    static redirect(url, status = 302) { return new Response(null, { status, headers: { location: new URL(url).href } }); }
    static error() { const r = new Response(null, { status: 200 }); r.status = 0; r.type = "error"; return r; }
  }

  // ---------------------------------------------------------- the host
  const pending = new Map();
  function call(op, args = {}, body) {
    return new Promise((resolve, reject) => {
      // (An explicit `undefined` would not convert to an optional typed array.)
      const id = body ? H.call(op, JSON.stringify(args), toBytes(body)) : H.call(op, JSON.stringify(args));
      pending.set(id, { resolve, reject });
    });
  }
  class HostError extends Error {
    constructor(message) { super(message); this.name = "HostError"; }
  }
  const hex = (v) => Array.from(toBytes(v), (b) => b.toString(16).padStart(2, "0")).join("");
  const unhex = (h) => { const out = new Uint8Array(h.length / 2); for (let i = 0; i < out.length; i++) out[i] = parseInt(h.substr(i * 2, 2), 16); return out; };
  async function hostFetch(input, init = {}) {
    const req = new Request(input, init);
    const body = req._stream ? await req.bytes() : req._bytes;
    const r = await call("http_fetch", { url: req.url, method: req.method, headers: [...req.headers] }, body);
    return new Response(r.body.length ? r.body : null, { status: r.status, headers: r.headers, url: req.url });
  }
  function logArgs(args) {
    return args.map((a) => (typeof a === "string" ? a : a instanceof Error ? a.stack ? `${a.name}: ${a.message}\n${a.stack}` : String(a) : (() => { try { return JSON.stringify(a); } catch { return String(a); } })())).join(" ");
  }
  const hearth = {
    HostError,
    kv: {
      async get(key) { const r = await call("kv_get", { key: hex(key) }); return r.found ? H.decode(r.body) : null; },
      async getBytes(key) { const r = await call("kv_get", { key: hex(key) }); return r.found ? r.body : null; },
      async set(key, value) { await call("kv_set", { key: hex(key) }, toBytes(value)); },
      async delete(key) { return !!(await call("kv_delete", { key: hex(key) })).existed; },
      async list(prefix = "") { const r = await call("kv_list", { prefix: hex(prefix) }); return r.keys.map((k) => H.decode(unhex(k))); },
    },
    fetch: hostFetch,
    log: (message, level = "info") => H.log("log", level, String(message)),
    // Work after the response: the invocation answers, then runs on
    // until every promise passed here settles (within its timeout).
    waitUntil(promise) { waiting.push(Promise.resolve(promise)); },
  };
  // What the invocation passed to waitUntil, in order.
  let waiting = [];
  const workersCtx = { waitUntil: hearth.waitUntil, passThroughOnException() {} };
  const console = {
    log: (...a) => H.log("log", "info", logArgs(a)),
    info: (...a) => H.log("log", "info", logArgs(a)),
    debug: (...a) => H.log("log", "debug", logArgs(a)),
    warn: (...a) => H.log("stderr", "warn", logArgs(a)),
    error: (...a) => H.log("stderr", "error", logArgs(a)),
    trace: (...a) => H.log("stderr", "debug", logArgs(a)),
  };

  // ---------------------------------------------------------- time, randomness
  // Date and Math.random come from the host (taped); Math.random is a
  // xorshift128+ seeded by one host random call per invocation.
  const OrigDate = Date;
  class HostDate extends OrigDate {
    constructor(...a) { if (a.length === 0) super(H.now()); else super(...a); }
    static now() { return H.now(); }
  }
  let seed = null;
  function random() {
    if (seed === null) {
      const b = H.random(16);
      seed = [0, 0, 0, 0].map((_, i) => (b[i * 4] | (b[i * 4 + 1] << 8) | (b[i * 4 + 2] << 16) | (b[i * 4 + 3] << 24)) >>> 0);
      if (seed.every((x) => x === 0)) seed[0] = 1;
    }
    // xorshift128 on four 32-bit words.
    let t = seed[3];
    const s = seed[0];
    seed[3] = seed[2]; seed[2] = seed[1]; seed[1] = s;
    t ^= t << 11; t ^= t >>> 8;
    seed[0] = (t ^ s ^ (s >>> 19)) >>> 0;
    return seed[0] / 4294967296;
  }
  const crypto = {
    getRandomValues(a) {
      if (!ArrayBuffer.isView(a)) throw new TypeError("getRandomValues needs a typed array");
      if (a.byteLength > 65536) throw new RangeError("getRandomValues: at most 65536 bytes");
      const b = H.random(a.byteLength);
      new Uint8Array(a.buffer, a.byteOffset, a.byteLength).set(b);
      return a;
    },
    randomUUID() {
      const b = H.random(16);
      b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
      const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
      return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
    },
    get subtle() { return unsupported("crypto.subtle"); },
  };
  const performance = { now: () => H.monotonic(), timeOrigin: 0 };

  // ---------------------------------------------------------- timers
  const timers = new Map();
  let nextTimer = 1;
  function setTimeout(f, ms = 0, ...args) {
    if (typeof f !== "function") throw new TypeError("setTimeout needs a function");
    const id = nextTimer++;
    timers.set(id, { due: H.clock() + Math.max(0, Number(ms) || 0), f, args, every: null });
    return id;
  }
  function setInterval(f, ms = 0, ...args) {
    const id = setTimeout(f, ms, ...args);
    timers.get(id).every = Math.max(1, Number(ms) || 0);
    return id;
  }
  const clearTimeout = (id) => { timers.delete(id); };
  const queueMicrotask = (f) => { Promise.resolve().then(f); };

  // ---------------------------------------------------------- Node.js bits
  let env = {};
  const process = new Proxy({}, {
    get(_, prop) {
      if (prop === "env") return env;
      if (prop === Symbol.toStringTag) return "process";
      return unsupported(`process.${String(prop)}`);
    },
    has(_, prop) { return prop === "env"; },
  });
  const cjsCache = new Map();
  // A top-level `main` of each CommonJS file (the wrapper returns it).
  const scopeMains = new Map();
  function makeRequire(from) {
    const require = (name) => {
      name = String(name);
      // Built-ins and packages not in the bundle: `Unsupported` (resolve says so).
      const path = H.resolve(from, name);
      if (cjsCache.has(path)) return cjsCache.get(path).exports;
      const module = { exports: {}, id: path, filename: path, loaded: false };
      cjsCache.set(path, module);
      if (path.endsWith(".json")) { module.exports = JSON.parse(H.decode(H.source(path))); return module.exports; }
      const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
      const scopeMain = H.cjs(path).call(module.exports, module.exports, makeRequire(path), module, "/code/" + path, "/code/" + dir);
      if (typeof scopeMain === "function") scopeMains.set(path, scopeMain);
      module.loaded = true;
      return module.exports;
    };
    require.resolve = (name) => H.resolve(from, name);
    return require;
  }

  const globals = {
    TextEncoder, TextDecoder, atob, btoa, URL, URLSearchParams, Headers, Request, Response,
    ReadableStream, ReadableStreamDefaultReader, ReadableStreamDefaultController,
    WritableStream, WritableStreamDefaultWriter, TransformStream,
    fetch: hostFetch, hearth, console, crypto, performance, setTimeout, setInterval,
    clearTimeout, clearInterval: clearTimeout, queueMicrotask, process, Date: HostDate,
    global: globalThis, self: globalThis,
  };
  for (const [k, v] of Object.entries(globals)) {
    Object.defineProperty(globalThis, k, { value: v, writable: true, configurable: true, enumerable: false });
  }
  Math.random = random;
  // `awslambda` (Lambda's response streaming) is Node.js's, through the fallback.
  for (const name of ["Buffer", "setImmediate", "clearImmediate", "__dirname", "__filename", "awslambda"]) {
    Object.defineProperty(globalThis, name, { get: () => unsupported(name), configurable: true });
  }
  globalThis.__hearth_require = (path) => makeRequire("")("./" + path);

  // ---------------------------------------------------------- the driver
  const shapes = __HEARTH_SHAPES__;
  let fn = null;
  // The body as the shapes take it: text, or base64 when not UTF-8.
  function bodyText(body) {
    if (H.isUtf8(body)) return [H.decode(body), false];
    let bin = "";
    for (const b of body) bin += String.fromCharCode(b);
    return [btoa(bin), true];
  }
  // The response body being streamed out, chunk by chunk (`pull`).
  let out = null;
  async function toResult(result, streaming) {
    if (result instanceof Response && result._stream && streaming) {
      if (result.bodyUsed) throw new TypeError("Body has already been consumed");
      result.bodyUsed = true;
      out = result._stream.getReader();
      return { status: result.status, headers: [...result.headers], streams: true };
    }
    if (result instanceof Response) {
      return { status: result.status, headers: [...result.headers], body: new Uint8Array(await result.arrayBuffer()) };
    }
    if (result && typeof result === "object" && (result.statusCode !== undefined || result.body !== undefined)) {
      const headers = Object.entries(result.headers || {}).map(([k, v]) => [k, String(v)]);
      let body = result.body ?? "";
      if (typeof body === "object" && !(body instanceof Uint8Array)) {
        body = JSON.stringify(body);
        if (!headers.some(([k]) => k.toLowerCase() === "content-type")) headers.push(["content-type", "application/json"]);
      }
      if (result.isBase64Encoded) {
        const bin = atob(body);
        body = Uint8Array.from(bin, (c) => c.charCodeAt(0));
      } else body = toBytes(body);
      return { status: result.statusCode ?? 200, headers, body };
    }
    if (result === undefined || result === null) return { status: 204, headers: [], body: new Uint8Array(0) };
    if (typeof result === "string") return { status: 200, headers: [["content-type", "text/plain; charset=utf-8"]], body: H.encode(result) };
    return { status: 200, headers: [["content-type", "application/json"]], body: H.encode(JSON.stringify(result)) };
  }

  globalThis.__hearth_driver = {
    // The entry module's namespace (ESM) or exports (CommonJS).
    // `handler`: the handler setting's function name, or null.
    load(ns, isCjs, entry, handler) {
      const scopeMain = isCjs ? scopeMains.get(entry) : undefined;
      if (isCjs) ns = { default: ns };
      fn = shapes.pick(ns, handler, scopeMain);
      if (!fn && handler) throw new Error(`${entry} exports no function ${handler} (the function's handler setting)`);
      if (!fn) throw new Error(`${entry} exports neither default { fetch }, handler nor main`);
    },
    async invoke(msg, body) {
      env = msg.env;
      seed = null;
      timers.clear();
      out = null;
      waiting = [];
      if (msg.streaming) {
        // The request arrives as it is read: one host call per chunk.
        const arriving = new ReadableStream({
          async pull(c) { const r = await call("body_read"); if (r.done) c.close(); else c.enqueue(r.body); },
        }, { highWaterMark: 0 });
        // Only the Workers shape takes a stream; the event shapes take the body whole.
        body = fn.shape === "workers" ? arriving : await readAll(arriving);
      }
      let result;
      if (fn.shape === "workers" && shapes.isScheduled(msg)) {
        // A firing: its event whole (a streamed body arrives as a stream).
        const whole = body instanceof Uint8Array ? body : await readAll(body);
        const event = JSON.parse(bodyText(whole)[0]);
        result = await shapes.runScheduled(fn, event, { ...env, hearth }, workersCtx);
      } else if (fn.shape === "workers") {
        // Parsed once, by Request; the other shapes never need the URL.
        const url = `http://function${msg.path}${msg.query ? "?" + msg.query : ""}`;
        const init = { method: msg.method, headers: msg.headers };
        if (!["GET", "HEAD"].includes(msg.method)) init.body = body;
        result = await fn.f(new Request(url, init), { ...env, hearth }, workersCtx);
      } else {
        result = await shapes.call(fn, msg, ...bodyText(body), HostDate.now(), () => H.clock());
      }
      return toResult(result, msg.streaming);
    },
    // Whether the invocation has work after its response.
    waiting() { return waiting.length > 0; },
    // That work, settled: the reasons of the promises that rejected (a
    // promise passed while it runs is waited for too).
    async after() {
      const failed = [];
      for (let i = 0; i < waiting.length; i++) {
        try { await waiting[i]; } catch (e) { failed.push(e instanceof Error ? `${e.name}: ${e.message}` : String(e)); }
      }
      waiting = [];
      return failed;
    },
    // The next chunk of the streamed response, or null at its end.
    async pull() {
      const { value, done } = await out.read();
      if (done) { out = null; return null; }
      if (!(value instanceof Uint8Array)) throw new TypeError("a response body stream must give Uint8Array chunks (encode text with TextEncoder)");
      return value;
    },
    // A host call finished.
    settle(id, ok, header, body) {
      const p = pending.get(id);
      if (!p) return;
      pending.delete(id);
      if (ok) p.resolve({ ...JSON.parse(header), body });
      else p.reject(new HostError(header));
    },
    // Runs due timers; returns ms until the next one, or -1.
    tick() {
      if (timers.size === 0) return -1;
      const now = H.clock();
      let next = -1;
      for (const [id, t] of [...timers]) {
        if (t.due <= now) {
          if (t.every) t.due = now + t.every; else timers.delete(id);
          t.f(...t.args);
        }
      }
      for (const t of timers.values()) { const d = t.due - now; if (next < 0 || d < next) next = Math.max(0, d); }
      return next;
    },
  };
})();
