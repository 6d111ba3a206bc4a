//! Functions written the way each platform's own documentation writes them,
//! deployed unchanged: Lambda handlers in Python and Node.js (API Gateway
//! proxy events), OpenWhisk actions, and what a missing or failing handler
//! gets. docs/compatibility.md is the table these hold Hearth to.

use hearth_test_support::require;
use serde_json::{Value, json};

use crate::harness::{Daemon, error_of, tar_of};

/// The request behind API Gateway's published payload examples (HTTP API
/// "payload format" page: path /my/path, parameter1 twice, header2 twice,
/// two cookies), sent to admin's function `name`.
async fn send_documented_request(d: &Daemon, name: &str) -> reqwest::Response {
    d.post(&format!(
        "/fn/admin/{name}/my/path?parameter1=value1&parameter1=value2&parameter2=value"
    ))
    .header("header1", "value1")
    .header("header2", "value1")
    .header("header2", "value2")
    .header("cookie", "cookie1; cookie2")
    .header("user-agent", "agent")
    .body("Hello from Lambda")
    .send()
    .await
    .unwrap()
}

/// Asserts the fields of `event` that the documented request determines,
/// as the published examples show them (2.0 and 1.0 side by side).
fn assert_documented_event(event: &Value, runtime: &str) {
    let expect = json!({
        // Payload format 2.0.
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/my/path",
        "rawQueryString": "parameter1=value1&parameter1=value2&parameter2=value",
        "cookies": ["cookie1", "cookie2"],
        "queryStringParameters": {"parameter1": "value1,value2", "parameter2": "value"},
        "body": "Hello from Lambda",
        "isBase64Encoded": false,
        // Payload format 1.0 (REST APIs, and HTTP APIs asked for 1.0).
        "httpMethod": "POST",
        "path": "/my/path",
        "multiValueQueryStringParameters": {"parameter1": ["value1", "value2"], "parameter2": ["value"]},
        "stageVariables": null,
    });
    for (k, v) in expect.as_object().unwrap() {
        assert_eq!(&event[k], v, "{runtime}: event.{k} in {event:#}");
    }
    let h = &event["headers"];
    assert_eq!(
        (&h["header1"], &h["header2"], &h["user-agent"]),
        (&json!("value1"), &json!("value1,value2"), &json!("agent")),
        "{runtime}: duplicate headers are joined with commas: {h}"
    );
    assert_eq!(
        event["multiValueHeaders"]["header2"],
        json!(["value1", "value2"]),
        "{runtime}"
    );
    let ctx = &event["requestContext"];
    assert_eq!(
        ctx["http"],
        json!({"method": "POST", "path": "/my/path", "protocol": "HTTP/1.1",
               "sourceIp": "127.0.0.1", "userAgent": "agent"}),
        "{runtime}"
    );
    assert_eq!(
        (&ctx["httpMethod"], &ctx["stage"], &ctx["routeKey"]),
        (&json!("POST"), &json!("$default"), &json!("$default")),
        "{runtime}"
    );
    // "04/Mar/2020:19:15:17 +0000", and the same instant in milliseconds.
    let time = ctx["time"].as_str().unwrap_or_default();
    let shape = regex_lite_time(time);
    assert!(shape, "{runtime}: requestContext.time {time:?}");
    assert_eq!(ctx["time"], ctx["requestTime"], "{runtime}");
    assert!(
        ctx["timeEpoch"].as_i64().unwrap_or(0) > 1_700_000_000_000,
        "{runtime}"
    );
    assert!(
        !ctx["requestId"].as_str().unwrap_or("").is_empty(),
        "{runtime}"
    );
}

/// dd/Mon/yyyy:hh:mm:ss +0000
fn regex_lite_time(t: &str) -> bool {
    let b = t.as_bytes();
    t.len() == 26
        && b[2] == b'/'
        && b[6] == b'/'
        && b[11] == b':'
        && t.ends_with(" +0000")
        && [0, 1, 7, 8, 9, 10, 12, 13, 15, 16, 18, 19]
            .iter()
            .all(|&i| b[i].is_ascii_digit())
}

/// The event minus what differs between any two invocations (and the
/// function's name).
fn stable(mut event: Value) -> Value {
    let ctx = event["requestContext"].as_object_mut().unwrap();
    for k in [
        "requestId",
        "time",
        "timeEpoch",
        "requestTime",
        "requestTimeEpoch",
        "apiId",
    ] {
        ctx.remove(k);
    }
    event
}

const ECHO_EVENT_PY: &str = r#"
import json

def lambda_handler(event, context):
    return {"statusCode": 200, "body": json.dumps(event)}
"#;

const ECHO_EVENT_JS: &str = r#"
exports.handler = async (event) => ({ statusCode: 200, body: JSON.stringify(event) });
"#;

#[tokio::test]
async fn lambda_handlers_get_the_api_gateway_proxy_event_in_every_runtime() {
    require!(Python);
    let d = Daemon::start();
    d.deploy(
        "py",
        ECHO_EVENT_PY.as_bytes().to_vec(),
        &[
            ("runtime", "python"),
            ("file_name", "lambda_function.py"),
            ("handler", "lambda_function.lambda_handler"),
        ],
    )
    .await;
    for runtime in ["node", "js"] {
        d.deploy(
            runtime,
            ECHO_EVENT_JS.as_bytes().to_vec(),
            &[("runtime", runtime), ("file_name", "index.js")],
        )
        .await;
    }
    let mut events = Vec::new();
    for name in ["py", "node", "js"] {
        let r = send_documented_request(&d, name).await;
        assert_eq!(r.status(), 200, "{name}");
        let event: Value = r.json().await.unwrap();
        assert_documented_event(&event, name);
        events.push(stable(event));
    }
    // Python builds its event apart from the JavaScript runtimes: all
    // three must agree on every field.
    assert_eq!(events[0], events[1], "python and node events differ");
    assert_eq!(events[1], events[2], "node and js (QuickJS) events differ");
}

/// Lambda's Python documentation: the console's default file and handler
/// name, `json.loads(event['body'])`, a JSON string back.
const LAMBDA_DOCS_PY: &str = r#"
import json

def lambda_handler(event, context):
    body = json.loads(event['body'])
    name = body.get('name', 'World')
    return {
        'statusCode': 200,
        'headers': {'Content-Type': 'application/json'},
        'body': json.dumps({'message': f'Hello, {name}!', 'function': context.function_name,
                            'remaining': context.get_remaining_time_in_millis() > 0})
    }
"#;

/// A one-parameter handler, found by name without a handler setting.
const ONE_ARG_PY: &str = r#"
def lambda_handler(event):
    return {"statusCode": 200, "body": event["httpMethod"]}
"#;

/// Lambda's Node.js documentation, callback style (pre-async handlers).
const LAMBDA_CALLBACK_JS: &str = r#"
exports.handler = function (event, context, callback) {
  const body = JSON.parse(event.body);
  setTimeout(() => callback(null, {
    statusCode: 200,
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ message: `Hello, ${body.name}!`, fn: context.functionName }),
  }), 1);
};
"#;

#[tokio::test]
async fn lambda_handlers_run_as_lambdas_documentation_writes_them() {
    require!(Python);
    let d = Daemon::start();
    let bundle = tar_of(&[("lambda_function.py", LAMBDA_DOCS_PY)]);
    d.deploy(
        "docs-py",
        bundle,
        &[
            ("runtime", "python"),
            ("file_name", "fn.tar"),
            ("handler", "lambda_function.lambda_handler"),
        ],
    )
    .await;
    let (status, body) = d.call("docs-py", "", r#"{"name": "Ada"}"#).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        json!({"message": "Hello, Ada!", "function": "docs-py", "remaining": true})
    );

    d.deploy(
        "one-arg",
        ONE_ARG_PY.as_bytes().to_vec(),
        &[("runtime", "python"), ("file_name", "app.py")],
    )
    .await;
    assert_eq!(d.call("one-arg", "", "{}").await, (200, "POST".into()));
    d.deploy(
        "async-py",
        b"import asyncio\nasync def handler(event, context):\n    await asyncio.sleep(0)\n    return 'awaited'\n".to_vec(),
        &[("runtime", "python"), ("file_name", "app.py")],
    )
    .await;
    assert_eq!(d.call("async-py", "", "").await, (200, "awaited".into()));

    for runtime in ["node", "js"] {
        let name = format!("cb-{runtime}");
        d.deploy(
            &name,
            LAMBDA_CALLBACK_JS.as_bytes().to_vec(),
            &[("runtime", runtime), ("file_name", "index.js")],
        )
        .await;
        let (status, body) = d.call(&name, "", r#"{"name": "Ada"}"#).await;
        assert_eq!(status, 200, "{runtime}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v,
            json!({"message": "Hello, Ada!", "fn": name}),
            "{runtime}"
        );
    }
}

/// OpenWhisk's documentation: Python `main(args)` and a JavaScript script
/// whose `main` is not exported.
const OPENWHISK_PY: &str = r#"
def main(args):
    name = args.get("name", "stranger")
    greeting = "Hello " + name + "!"
    print(greeting)
    return {"greeting": greeting, "method": args["__ow_method"], "path": args["__ow_path"]}
"#;

const OPENWHISK_JS: &str = r#"
function main(params) {
  if (params.fail) return { error: "asked to fail" };
  const name = params.name || "stranger";
  return { payload: "Hello, " + name + "!", method: params.__ow_method, got: params.__ow_body };
}
"#;

#[tokio::test]
async fn openwhisk_actions_get_merged_params() {
    require!(Python);
    let d = Daemon::start();
    d.deploy(
        "ow-py",
        OPENWHISK_PY.as_bytes().to_vec(),
        &[("runtime", "python"), ("file_name", "hello.py")],
    )
    .await;
    // Body parameters override query parameters, as in OpenWhisk.
    let (status, body) = d
        .call("ow-py", "/sub?name=query", r#"{"name": "Jane"}"#)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"greeting": "Hello Jane!", "method": "post", "path": "/sub"})
    );

    for runtime in ["node", "js"] {
        let name = format!("ow-{runtime}");
        d.deploy(
            &name,
            OPENWHISK_JS.as_bytes().to_vec(),
            &[("runtime", runtime), ("file_name", "hello.js")],
        )
        .await;
        let (status, body) = d.call(&name, "?name=Jane", "").await;
        assert_eq!(status, 200, "{runtime}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"payload": "Hello, Jane!", "method": "post"}),
            "{runtime}"
        );
        // A body that is not a JSON object arrives whole in __ow_body.
        let r = d
            .post(&format!("/fn/admin/{name}"))
            .header("content-type", "text/plain")
            .body("Jane")
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["got"], "Jane", "{runtime}: {v}");
        // { error } is OpenWhisk's application error: not a 200.
        let (status, body) = d.call(&name, "?fail=1", "").await;
        assert_eq!(status, 400, "{runtime}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"error": "asked to fail"})
        );
    }
}

#[tokio::test]
async fn a_missing_handler_is_refused_at_deploy_and_a_raised_error_is_never_a_200() {
    require!(Python);
    let d = Daemon::start();
    // (runtime, file, code, handler setting, what the 400 must say)
    let refused = [
        (
            "python",
            "app.py",
            "def handler(event, context):\n    return 1\n",
            Some("app.lambda_handler"),
            "app.py defines no lambda_handler",
        ),
        (
            "python",
            "app.py",
            "def helper(x):\n    return x\n",
            None,
            "defines none of handler, main, lambda_handler: define one, or name yours with --handler",
        ),
        (
            "python",
            "app.py",
            "def handler(event, context):\n    return 1\n",
            Some("other.handler"),
            "no other.py or other/__init__.py",
        ),
        (
            "node",
            "index.js",
            "exports.handler = async () => 1;\n",
            Some("index.lambdaHandler"),
            "never mentions lambdaHandler",
        ),
        (
            "js",
            "index.js",
            "exports.handler = async () => 1;\n",
            Some("index.lambdaHandler"),
            "never mentions lambdaHandler",
        ),
        (
            "wasm",
            "m.wat",
            "(module)",
            Some("a.b"),
            "applies to Python, Node.js and JavaScript",
        ),
    ];
    for (runtime, file, code, handler, says) in refused {
        let mut query = vec![("runtime", runtime), ("file_name", file)];
        query.extend(handler.map(|h| ("handler", h)));
        let r = d
            .deploy_raw("refused", code.as_bytes().to_vec(), &query)
            .await;
        let (status, _, msg) = error_of(r).await;
        assert_eq!(status, 400, "{runtime} {handler:?}: {msg}");
        assert!(msg.contains(says), "{runtime} {handler:?}: {msg}");
    }
    // A handler bound in a way the check cannot see still deploys.
    d.deploy(
        "dynamic",
        b"globals()['handler'] = lambda event, context: 'ok'\n".to_vec(),
        &[("runtime", "python"), ("file_name", "dyn.py")],
    )
    .await;
    assert_eq!(d.call("dynamic", "", "").await, (200, "ok".into()));

    // An exception is a 500 function_error in every runtime.
    let cases = [
        (
            "python",
            "boom.py",
            "def handler(event, context):\n    raise ValueError('boom')\n",
        ),
        (
            "node",
            "boom.js",
            "exports.handler = async () => { throw new Error('boom'); };\n",
        ),
        (
            "js",
            "boom.js",
            "exports.handler = async () => { throw new Error('boom'); };\n",
        ),
    ];
    for (runtime, file, code) in cases {
        let name = format!("boom-{runtime}");
        d.deploy(
            &name,
            code.as_bytes().to_vec(),
            &[("runtime", runtime), ("file_name", file)],
        )
        .await;
        let r = d.post(&format!("/fn/admin/{name}")).send().await.unwrap();
        let (status, kind, msg) = error_of(r).await;
        assert_eq!(
            (status, kind.as_str()),
            (500, "function_error"),
            "{runtime}: {msg}"
        );
        assert!(msg.contains("boom"), "{runtime}: {msg}");
    }
}

/// Regression: a bundle packed from a directory whose code sits in one
/// package (`myfn/app/main.py`) deployed, and then failed at its first
/// invocation: the upload's top directory was stripped at deploy, and the
/// stored artifact was stripped once more when the tier loaded it
/// (`app/` gone, so no `app.main`). It runs as deployed, in both tiers
/// that take bundles.
#[tokio::test]
async fn a_bundle_whose_code_sits_in_one_package_runs_as_deployed() {
    require!(Python);
    let d = Daemon::start();
    let py = tar_of(&[
        ("myfn/app/__init__.py", ""),
        (
            "myfn/app/main.py",
            "def handler(event, context):\n    return {'statusCode': 200, 'body': 'from app.main'}\n",
        ),
    ]);
    d.deploy(
        "nested-py",
        py,
        &[
            ("runtime", "python"),
            ("file_name", "fn.tar"),
            ("handler", "app.main.handler"),
        ],
    )
    .await;
    assert_eq!(
        d.call("nested-py", "", "").await,
        (200, "from app.main".into())
    );

    let js = tar_of(&[(
        "site/src/index.mjs",
        "export const handler = async () => ({ statusCode: 200, body: 'from src/index' });\n",
    )]);
    d.deploy(
        "nested-js",
        js,
        &[
            ("runtime", "js"),
            ("file_name", "fn.tar"),
            ("handler", "src/index.handler"),
        ],
    )
    .await;
    assert_eq!(
        d.call("nested-js", "", "").await,
        (200, "from src/index".into())
    );
}
