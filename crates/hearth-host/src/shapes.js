// How a JavaScript function is found and called, and the events the
// platforms it was written for give it (docs/compatibility.md). One file
// for both JavaScript runtimes — the js tier's prelude (QuickJS) and the
// process tier's Node.js helper — so a function that falls back from one
// to the other sees the same event. (helper.py builds the same shapes for
// Python; the conformance tests hold the three to the same output.)
//
// An expression: evaluating it gives the functions. It runs before any
// function's code, so the built-ins it captures are the real ones.
(() => {
  const RealDate = Date;
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const hasOwn = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
  const dict = () => Object.create(null);
  const plain = (o) => Object.assign({}, o);

  function decodeComponent(s) {
    try {
      return decodeURIComponent(s.replace(/\+/g, " "));
    } catch {
      return s;
    }
  }

  // `a=1&a=2&b` as [["a", "1"], ["a", "2"], ["b", ""]].
  function parsePairs(text) {
    const out = [];
    for (const part of text.split("&")) {
      if (!part) continue;
      const i = part.indexOf("=");
      out.push(i < 0 ? [decodeComponent(part), ""] : [decodeComponent(part.slice(0, i)), decodeComponent(part.slice(i + 1))]);
    }
    return out;
  }

  function grouped(pairs) {
    const out = dict();
    for (const [k, v] of pairs) (out[k] ??= []).push(v);
    return out;
  }

  const joined = (multi) => Object.fromEntries(Object.entries(multi).map(([k, v]) => [k, v.join(",")]));

  function apiGatewayTime(ms) {
    const d = new RealDate(ms);
    const p = (n) => String(n).padStart(2, "0");
    return `${p(d.getUTCDate())}/${MONTHS[d.getUTCMonth()]}/${d.getUTCFullYear()}:${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())} +0000`;
  }

  // The event API Gateway sends a Lambda proxy integration: payload format
  // 2.0 (HTTP APIs, function URLs) and 1.0 (REST APIs) in one object, since
  // their fields do not collide. `text` is the body as text, or base64 when
  // `isBase64Encoded`; `wallMs` the invocation's (taped) start time.
  function lambdaEvent(msg, text, isBase64Encoded, wallMs) {
    const { method, path } = msg;
    const rawQuery = msg.query || "";
    const multiHeaders = grouped(msg.headers);
    const headers = joined(multiHeaders);
    const multiQuery = grouped(parsePairs(rawQuery));
    const anyQuery = Object.keys(multiQuery).length > 0;
    const when = apiGatewayTime(wallMs);
    const host = headers.host || "";
    const sourceIp = (headers["x-forwarded-for"] || "").split(",")[0].trim() || "127.0.0.1";
    const userAgent = headers["user-agent"] || "";
    const proxy = path.replace(/^\/+/, "");
    const event = {
      version: "2.0",
      routeKey: "$default",
      rawPath: path,
      rawQueryString: rawQuery,
      resource: "/{proxy+}",
      path,
      httpMethod: method,
      headers: plain(headers),
      multiValueHeaders: plain(multiHeaders),
      queryStringParameters: anyQuery ? plain(joined(multiQuery)) : null,
      multiValueQueryStringParameters: anyQuery ? plain(multiQuery) : null,
      pathParameters: proxy ? { proxy } : null,
      stageVariables: null,
      requestContext: {
        accountId: msg.tenant || "",
        apiId: msg.function || "",
        domainName: host,
        domainPrefix: host.split(".")[0],
        http: { method, path, protocol: "HTTP/1.1", sourceIp, userAgent },
        httpMethod: method,
        identity: { sourceIp, userAgent },
        path,
        protocol: "HTTP/1.1",
        requestId: msg.id,
        requestTime: when,
        requestTimeEpoch: wallMs,
        resourcePath: "/{proxy+}",
        routeKey: "$default",
        stage: "$default",
        time: when,
        timeEpoch: wallMs,
      },
      body: text.length ? text : null,
      isBase64Encoded,
    };
    const cookies = (multiHeaders.cookie || []).flatMap((h) => h.split(";")).map((c) => c.trim()).filter(Boolean);
    if (cookies.length) event.cookies = cookies;
    return event;
  }

  // A web action's parameters as OpenWhisk builds them: query parameters,
  // then the body's (a JSON object's members, or form fields) over them,
  // and __ow_method, __ow_headers, __ow_path; any other body arrives whole
  // as __ow_body (base64 when binary).
  function openwhiskParams(msg, text, isBase64Encoded) {
    const headers = plain(joined(grouped(msg.headers)));
    const params = {};
    for (const [k, v] of parsePairs(msg.query || "")) params[k] = v;
    const ctype = (headers["content-type"] || "").split(";")[0].trim().toLowerCase();
    let merged = null;
    if (text && !isBase64Encoded && ctype === "application/json") {
      try {
        merged = JSON.parse(text);
      } catch {}
      if (!merged || typeof merged !== "object" || Array.isArray(merged)) merged = null;
    } else if (text && !isBase64Encoded && ctype === "application/x-www-form-urlencoded") {
      merged = Object.fromEntries(parsePairs(text));
    }
    if (merged) Object.assign(params, merged);
    else if (text) params.__ow_body = text;
    params.__ow_method = msg.method.toLowerCase();
    params.__ow_headers = headers;
    params.__ow_path = msg.path === "/" ? "" : msg.path;
    return params;
  }

  // An action that returns { error } failed (OpenWhisk's application
  // error): the error is the response if it is one, else a 400 with it.
  function openwhiskResult(result) {
    if (result && typeof result === "object" && hasOwn(result, "error")) {
      const err = result.error;
      if (err && typeof err === "object" && ("statusCode" in err || "body" in err)) return err;
      return { statusCode: 400, body: { error: err } };
    }
    return result;
  }

  // The function to call in an entry module's namespace. `name` is the
  // handler setting's function, if any; `scopeMain` a `main` declared at
  // the top of a CommonJS script without being exported (how OpenWhisk's
  // documentation writes actions). A function named main is OpenWhisk's
  // (params); any other Lambda's (event, context[, callback]).
  function pick(ns, name, scopeMain) {
    const def = ns.default;
    const fnIn = (o, k) => (o && (typeof o === "object" || typeof o === "function") && typeof o[k] === "function" ? o[k] : null);
    const shape = (k) => (k === "main" ? "openwhisk" : "lambda");
    if (name) {
      const f = fnIn(ns, name) || fnIn(def, name) || (name === "main" ? scopeMain : null);
      return f ? { shape: shape(name), f } : null;
    }
    if (def && (typeof def.fetch === "function" || typeof def.scheduled === "function")) {
      const f = typeof def.fetch === "function" ? def.fetch.bind(def) : () => {
        throw new Error("this Workers module exports scheduled() but no fetch(): it runs on its schedule, not over HTTP");
      };
      const scheduled = typeof def.scheduled === "function" ? def.scheduled.bind(def) : null;
      return { shape: "workers", f, scheduled };
    }
    for (const k of ["handler", "main"]) {
      const f = fnIn(ns, k) || fnIn(def, k);
      if (f) return { shape: shape(k), f };
    }
    if (scopeMain) return { shape: "openwhisk", f: scopeMain };
    if (typeof def === "function") return { shape: "lambda", f: def };
    return null;
  }

  // Whether the request is a schedule's firing (docs/events.md): the
  // platform's own header, which the node takes out of every request that
  // does not come from Hearth's queue. Its body is EventBridge's event.
  function isScheduled(msg) {
    return msg.headers.some(([k, v]) => k.toLowerCase() === "hearth-event" && v === "scheduled");
  }

  // Runs a Workers module's scheduled(controller, env, ctx) for a firing
  // `event`; nothing to answer (204).
  async function runScheduled(fn, event, env, ctx) {
    if (!fn.scheduled) {
      throw new Error(
        "this function has a schedule but its Workers module exports no scheduled() handler: add `async scheduled(controller, env, ctx)` to its default export",
      );
    }
    const detail = event.detail || {};
    const controller = { cron: detail.cron, scheduledTime: detail.scheduledTime, type: "scheduled", noRetry() {} };
    await fn.scheduled(controller, env, ctx);
    return undefined;
  }

  // Calls a Lambda handler: async, or (three parameters) with a callback,
  // whichever settles first, as Lambda's Node.js runtime does.
  function callLambda(f, event, context) {
    if (f.length < 3) return f(event, context);
    return new Promise((resolve, reject) => {
      const callback = (err, value) => (err ? reject(err) : resolve(value));
      const r = f(event, context, callback);
      if (r && typeof r.then === "function") r.then((v) => v !== undefined && resolve(v), reject);
    });
  }

  // Calls a Lambda- or OpenWhisk-shaped function (a Workers `fetch` gets
  // each runtime's own Request) with what its platform would pass; the
  // result is for the runtime's response conversion. `text` and
  // `isBase64Encoded`: the body; `wallMs`: the invocation's taped start;
  // `clockMs`: a clock in ms for the context's remaining time;
  // `responseStream`: a Lambda streaming handler's (Node.js only).
  // A schedule's firing gives either its EventBridge event whole.
  async function call(fn, msg, text, isBase64Encoded, wallMs, clockMs, responseStream) {
    const scheduled = isScheduled(msg) ? JSON.parse(text) : null;
    if (fn.shape === "openwhisk") return openwhiskResult(await fn.f(scheduled || openwhiskParams(msg, text, isBase64Encoded)));
    const deadline = clockMs() + (msg.remaining_ms || 0);
    const context = {
      awsRequestId: msg.id,
      invocationId: msg.id,
      functionName: msg.function,
      functionVersion: String(msg.version),
      memoryLimitInMB: String(msg.memory_mib),
      invokedFunctionArn: `arn:hearth:function:${msg.tenant}:${msg.function}`,
      logGroupName: `/hearth/${msg.tenant}/${msg.function}`,
      logStreamName: String(msg.version),
      callbackWaitsForEmptyEventLoop: true,
      getRemainingTimeInMillis: () => Math.max(0, deadline - clockMs()),
    };
    const event = scheduled || lambdaEvent(msg, text, isBase64Encoded, wallMs);
    if (responseStream) return fn.f(event, responseStream, context);
    return callLambda(fn.f, event, context);
  }

  return { pick, call, isScheduled, runScheduled };
})()
