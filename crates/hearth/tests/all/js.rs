//! The js tier end to end: QuickJS isolates, their web APIs, hostile code,
//! and the transparent fallback to the process tier.

use std::time::Duration;

use crate::harness::{Daemon, error_of, spin_times_out_while_ok_answers, tar_of};

async fn deploy(d: &Daemon, name: &str, file: &str, code: &[u8], query: &[(&str, &str)]) {
    let mut q = vec![("runtime", "js"), ("file_name", file)];
    q.extend_from_slice(query);
    d.deploy(name, code.to_vec(), &q).await;
}

fn text(logs: &[serde_json::Value]) -> String {
    serde_json::Value::from(logs.to_vec()).to_string()
}

fn by_name<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap()
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

const WORKER: &str = r#"
import { greet } from "./lib/greet.mjs";
const counter = require_free();
function require_free() { return { n: 0 }; }
export default {
  async fetch(request, env) {
    counter.n += 1;
    const url = new URL(request.url);
    const n = Number((await hearth.kv.get("n")) ?? 0) + 1;
    await hearth.kv.set("n", String(n));
    console.log("visit", n);
    await new Promise((r) => setTimeout(r, 2));
    const bytes = new TextEncoder().encode("héllo");
    return Response.json({
      n, warm: counter.n, greet: greet(url.searchParams.get("who")), path: url.pathname,
      body: await request.json(), env: env.GREETING,
      utf8: bytes.length, back: new TextDecoder().decode(bytes), b64: btoa("hi"), unb64: atob("aGk="),
      uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-4/.test(crypto.randomUUID()),
      now: Math.abs(Date.now() - new Date().getTime()) < 5000, random: Math.random() < 1,
      header: request.headers.get("x-test"),
    }, { status: 201, headers: { "x-n": String(n) } });
  },
};
"#;

const LAMBDA: &str = r#"
const { double } = require("./util");
const data = require("./data.json");
exports.handler = async (event, context) => ({
  statusCode: 200,
  headers: { "content-type": "application/json" },
  body: { twice: double(JSON.parse(event.body).x), label: data.label, method: event.httpMethod,
          q: event.queryStringParameters.a, fn: context.functionName },
});
"#;

#[tokio::test]
async fn js_functions_run_in_isolates_with_web_apis_and_both_shapes() {
    let d = Daemon::start();
    let bundle = tar_of(&[
        ("index.mjs", WORKER),
        ("lib/greet.mjs", "export const greet = (w) => `hi ${w}`;\n"),
    ]);
    deploy(&d, "w", "w.tar", &bundle, &[("env", "GREETING=hey")]).await;
    for n in 1..=2 {
        let r = d
            .post("/fn/admin/w/some/path?who=ann")
            .header("x-test", "yes")
            .body(r#"{"a": 1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        assert_eq!(r.headers()["x-n"], n.to_string());
        let v = json(&r.text().await.unwrap());
        assert_eq!(v["n"], n, "KV persists: {v}");
        assert_eq!(v["warm"], n, "the isolate is reused, with its state: {v}");
        assert_eq!(v["greet"], "hi ann");
        assert_eq!(v["path"], "/some/path");
        assert_eq!(v["body"]["a"], 1);
        assert_eq!(v["env"], "hey");
        assert_eq!(
            (v["utf8"].as_u64(), v["back"].as_str()),
            (Some(6), Some("héllo"))
        );
        assert_eq!(
            (v["b64"].as_str(), v["unb64"].as_str()),
            (Some("aGk="), Some("hi"))
        );
        assert_eq!(v["uuid"], true);
        assert_eq!(v["now"], true);
        assert_eq!(v["random"], true);
        assert_eq!(v["header"], "yes");
    }
    let logs = d.logs_until("w", |v| text(v).contains("visit 2")).await;
    assert!(text(&logs).contains("visit 1"), "{logs:?}");

    // A new version gets fresh isolates: module state starts again.
    let bundle = tar_of(&[
        ("index.mjs", WORKER),
        ("lib/greet.mjs", "export const greet = (w) => `yo ${w}`;\n"),
    ]);
    deploy(&d, "w", "w.tar", &bundle, &[]).await;
    let v = json(&d.call("w", "?who=bo", "{}").await.1);
    assert_eq!(
        (v["warm"].as_u64(), v["greet"].as_str()),
        (Some(1), Some("yo bo"))
    );

    // Lambda shape, CommonJS with require of files and JSON in the bundle.
    let bundle = tar_of(&[
        ("index.js", LAMBDA),
        ("util.js", "module.exports.double = (x) => x * 2;\n"),
        ("data.json", r#"{"label": "from json"}"#),
    ]);
    deploy(&d, "lam", "lam.tar", &bundle, &[]).await;
    let (status, body) = d.call("lam", "?a=b", r#"{"x": 21}"#).await;
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["twice"], 42);
    assert_eq!(v["label"], "from json");
    assert_eq!(
        (v["method"].as_str(), v["q"].as_str(), v["fn"].as_str()),
        (Some("POST"), Some("b"), Some("lam"))
    );

    // `export const handler` (Lambda shape in an ES module).
    let esm = b"export const handler = async (event) => ({ statusCode: 202, body: { m: event.httpMethod } });";
    deploy(&d, "esm", "handler.mjs", esm, &[]).await;
    assert_eq!(d.call("esm", "", "").await, (202, r#"{"m":"POST"}"#.into()));

    let status: serde_json::Value = d.get_json("/v1/status").await;
    assert!(
        status["tiers"]["js"]["details"]["idle_isolates"]
            .as_u64()
            .unwrap()
            >= 2,
        "{status}"
    );
    // None of this needed the process tier.
    let metrics = d.get_text("/metrics").await;
    assert!(!metrics.contains("hearth_js_fallbacks_total{"), "{metrics}");

    // Each worker keeps a blank isolate (prelude loaded, no function); the
    // versions above took some, and idle workers made new ones.
    let workers = status["tiers"]["js"]["details"]["workers"]
        .as_u64()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = d.get_json("/v1/status").await;
        let blank = status["tiers"]["js"]["details"]["blank_isolates"].as_u64();
        if blank == Some(workers) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const FALLS_BACK: &str = r#"
exports.handler = async () => {
  const n = Number((await hearth.kv.get("n")) ?? 0) + 1;
  await hearth.kv.set("n", String(n));
  let caught = "not caught";
  try { require("fs"); } catch (e) { caught = "caught"; }
  return { n, node: require("fs").existsSync("/code/index.js"), caught };
};
"#;

#[tokio::test]
async fn unsupported_code_reruns_in_node_with_each_effect_once_then_is_pinned() {
    let d = Daemon::start_with(&["--js-pin-after", "3", "--metrics-per-function", "true"]);
    deploy(&d, "fb", "index.js", FALLS_BACK.as_bytes(), &[]).await;
    for n in 1..=4 {
        let (status, body) = d.call("fb", "", "").await;
        assert_eq!(status, 200, "{body}");
        let v = json(&body);
        assert_eq!(
            v["n"], n,
            "the counter moves by exactly one per request, though the isolate incremented it before bouncing: {v}"
        );
        assert_eq!(v["node"], true, "ran in Node.js: {v}");
        assert_eq!(
            v["caught"], "not caught",
            "the isolate's catch did not swallow the fallback; in Node, require works: {v}"
        );
    }
    // Three bounces pinned it; the fourth request went straight to Node.
    let list: serde_json::Value = d.get_json("/v1/functions").await;
    let f = by_name(&list, "fb");
    assert_eq!(
        (f["bounces"].as_u64(), f["pinned"].as_bool()),
        (Some(3), Some(true)),
        "{list}"
    );
    let metrics = d.get_text("/metrics").await;
    assert!(
        metrics.contains(r#"hearth_js_fallbacks_total{tenant="admin",function="fb"} 3"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"hearth_js_pinned{tenant="admin",function="fb"} 1"#),
        "{metrics}"
    );
    let logs = d
        .logs_until("fb", |v| text(v).contains("process tier"))
        .await;
    assert!(text(&logs).contains("fs"), "the reason is logged: {logs:?}");

    // A new deploy gets a new chance in the isolate tier.
    deploy(
        &d,
        "fb",
        "index.js",
        b"exports.handler = async () => ({ tier: typeof process.version });",
        &[],
    )
    .await;
    let list: serde_json::Value = d.get_json("/v1/functions").await;
    assert_eq!(by_name(&list, "fb")["pinned"], false, "{list}");
    // `process.version` is Node-only: it bounces, and Node answers.
    let (status, body) = d.call("fb", "", "").await;
    assert_eq!(
        (status, json(&body)["tier"].as_str()),
        (200, Some("string")),
        "{body}"
    );
}

const HOSTILE: &str = r#"
export default {
  async fetch(request) {
    const what = new URL(request.url).searchParams.get("what");
    if (what === "spin") { for (;;) {} }
    if (what === "spin-catch") { for (;;) { try { for (;;) {} } catch (e) {} } }
    if (what === "mem") { const a = []; for (;;) a.push(new Array(1 << 16).fill(7)); }
    if (what === "deep") { const f = (n) => f(n + 1) + 1; return new Response(String(f(0))); }
    return new Response("fine");
  },
};
"#;

#[tokio::test]
async fn hostile_js_is_contained_and_others_keep_serving() {
    let d = Daemon::start();
    deploy(
        &d,
        "bad",
        "index.mjs",
        HOSTILE.as_bytes(),
        &[("timeout_ms", "1000"), ("memory_mib", "32")],
    )
    .await;
    deploy(
        &d,
        "ok",
        "index.mjs",
        b"export default { fetch() { return new Response('ok'); } };",
        &[],
    )
    .await;

    for what in ["spin", "spin-catch"] {
        let spin = format!("/fn/admin/bad?what={what}");
        spin_times_out_while_ok_answers(&d, &spin, Duration::from_millis(500)).await;
    }
    let (status, kind, msg) =
        error_of(d.post("/fn/admin/bad?what=mem").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (500, "out_of_memory"), "{msg}");
    assert!(msg.contains("32 MiB"), "{msg}");
    let (status, kind, msg) =
        error_of(d.post("/fn/admin/bad?what=deep").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (500, "function_error"), "{msg}");
    assert!(msg.contains("stack"), "{msg}");
    assert_eq!(d.call("bad", "", "").await, (200, "fine".into()));

    // A syntax error is refused at deploy, with file, line and column.
    let r = d
        .deploy_raw(
            "broken",
            b"export default {\n  fetch() { return 1 +; }\n};\n".to_vec(),
            &[("runtime", "js"), ("file_name", "index.mjs")],
        )
        .await;
    let (status, _, msg) = error_of(r).await;
    assert_eq!(status, 400);
    assert!(msg.contains("index.mjs:2:"), "{msg}");
}

/// The function the WHATWG URL cases run in: each case parses (or sets) a
/// URL and compares every component; it answers the cases that differ.
const URL_CASES_JS: &str = r#"
const FIELDS = ["href", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"];
export default {
  async fetch(request) {
    const cases = await request.json();
    const failures = [];
    for (const c of cases) {
      let u;
      try {
        u = c.base == null ? new URL(c.input) : new URL(c.input, c.base);
        if (c.field) u[c.field] = c.value;
      } catch (e) {
        if (!c.failure) failures.push({ case: c.name, threw: String(e) });
        continue;
      }
      if (c.failure) { failures.push({ case: c.name, parsed: u.href }); continue; }
      for (const f of FIELDS) {
        if (f in c.expect && u[f] !== c.expect[f]) failures.push({ case: c.name, field: f, got: u[f], want: c.expect[f] });
      }
      // The query and searchParams stay one: a round trip through it
      // leaves a form-encoded query unchanged.
      if (!c.field && u.searchParams.toString() !== new URLSearchParams(u.search).toString()) {
        failures.push({ case: c.name, searchParams: u.searchParams.toString() });
      }
    }
    return Response.json({ checked: cases.length, failures });
  },
};
"#;

/// `URL` and `URLSearchParams` are the WHATWG URL Standard's: every parse
/// and setter case of the Web Platform Tests that the `url` crate passes
/// (its own list of the rest in `tests/data/wpt-url/`), run in an isolate.
#[tokio::test]
async fn the_url_api_passes_the_whatwg_url_tests() {
    use serde_json::{Value, json};
    let data = crate::harness::crate_dir().join("tests/data/wpt-url");
    let read = |f: &str| std::fs::read_to_string(data.join(f)).unwrap();
    let skipped: Vec<String> = read("expected_failures.txt")
        .lines()
        .map(str::to_string)
        .collect();
    let mut cases = Vec::new();
    let parse: Vec<Value> = serde_json::from_str(&read("urltestdata.json")).unwrap();
    for c in parse.iter().filter(|c| c.is_object()) {
        let input = c["input"].as_str().unwrap();
        let mut name = format!("<{}>", input.escape_default());
        if let Some(base) = c["base"].as_str() {
            name += &format!(" against <{}>", base.escape_default());
        }
        if skipped.contains(&name) {
            continue;
        }
        cases.push(json!({
            "name": name, "input": input, "base": c["base"],
            "failure": c["failure"].as_bool().unwrap_or(false), "expect": c,
        }));
    }
    let parse_cases = cases.len();
    let setters: serde_json::Map<String, Value> =
        serde_json::from_str(&read("setters_tests.json")).unwrap();
    for (field, tests) in setters.iter().filter(|(k, _)| *k != "comment") {
        for t in tests.as_array().unwrap() {
            let (href, value) = (
                t["href"].as_str().unwrap(),
                t["new_value"].as_str().unwrap(),
            );
            let name = format!(
                "<{}> set {field} to <{}>",
                href.escape_default(),
                value.escape_default()
            );
            if skipped.contains(&name) {
                continue;
            }
            cases.push(json!({
                "name": name, "input": href, "field": field, "value": value,
                "expect": t["expected"],
            }));
        }
    }
    assert!(
        parse_cases > 700 && cases.len() > parse_cases + 200,
        "{} cases",
        cases.len()
    );

    let d = Daemon::start();
    deploy(&d, "urls", "index.mjs", URL_CASES_JS.as_bytes(), &[]).await;
    let (status, body) = d
        .call("urls", "", &serde_json::to_string(&cases).unwrap())
        .await;
    assert_eq!(status, 200, "{body}");
    let report = json(&body);
    assert_eq!(report["checked"], cases.len(), "{body}");
    let failures = report["failures"].as_array().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} WHATWG URL cases differ: {:#}",
        failures.len(),
        cases.len(),
        Value::from(failures[..failures.len().min(20)].to_vec())
    );
}
