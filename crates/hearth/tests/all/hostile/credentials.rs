//! Hearth's own credentials never reach function code or tapes.

use crate::harness::Daemon;

/// Each tier's function answers with the `Authorization` header it saw
/// (empty when none).
const JS: &str = "export default { fetch(req) { \
    return new Response(req.headers.get('authorization') ?? ''); } };";
const NODE: &str = "module.exports.handler = async (event) => \
    ({ statusCode: 200, body: event.headers['authorization'] || '' });\n";
const PYTHON: &str = "def handler(event, context):\n    \
    return {'statusCode': 200, 'body': event['headers'].get('authorization', '')}\n";

async fn deploy_all(d: &Daemon, public: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (name, file, code, runtime) in [
        ("js", "index.mjs", JS, "js"),
        ("node", "index.js", NODE, "node"),
        ("py", "handler.py", PYTHON, "python"),
    ] {
        let name = format!("{name}-{public}");
        d.deploy(
            &name,
            code.as_bytes().to_vec(),
            &[
                ("runtime", runtime),
                ("file_name", file),
                ("public", public),
            ],
        )
        .await;
        names.push(name);
    }
    names
}

#[tokio::test]
async fn a_hearth_token_reaches_neither_function_code_nor_tapes() {
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    let mut names = deploy_all(&d, "false").await;
    names.extend(deploy_all(&d, "true").await);
    for name in &names {
        // The admin's token, on a private function (it authenticates the
        // call) and on a public one (where it was sent by mistake, or by an
        // admin invoking a tenant's function).
        let r = d.post(&format!("/fn/admin/{name}")).send().await.unwrap();
        let status = r.status();
        let seen = r.text().await.unwrap();
        assert_eq!(status, 200, "{name}: {seen}");
        assert_eq!(seen, "", "{name} saw the caller's Hearth token");
        // Another tenant's token on a public function: not the function's
        // to keep either, valid or not.
        for token in [acme.as_str(), "hth_0123456789abcdef"] {
            if name.ends_with("false") {
                continue;
            }
            let r = d.invoke_as(token, "admin", name).send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), "", "{name} saw {token}");
        }
    }
    // A public function's own scheme passes through unchanged.
    for name in names.iter().filter(|n| n.ends_with("true")) {
        for own in ["Bearer app-session-42", "Basic dXNlcjpwYXNz"] {
            let r = d
                .http
                .post(format!("{}/fn/admin/{name}", d.url))
                .header("authorization", own)
                .send()
                .await
                .unwrap();
            assert_eq!(r.text().await.unwrap(), own, "{name}");
        }
    }
    // And no tape holds a Hearth token, in any tier: the owner reads its
    // tapes whole. (The wasm tier never passes `Authorization` to code, as
    // CGI does not; its tape is the request as Hearth took it.)
    assert_eq!(d.invoke("hello", b"").await.status(), 200);
    names.push("hello".into());
    for name in &names {
        // Private: the admin's call; public: also two other tokens and
        // two schemes of the function's own.
        let calls = if name.ends_with("true") { 5 } else { 1 };
        d.newest_tape(name, calls).await;
        let v = d
            .get_json(&format!("/v1/functions/{name}/recordings"))
            .await;
        let ids: Vec<&str> = v["recordings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), calls, "{name}");
        for id in ids {
            let tape = d.get_text(&format!("/v1/recordings/{id}")).await;
            assert!(
                !tape.contains(&d.token) && !tape.contains(&acme) && !tape.contains("hth_"),
                "{name}'s tape {id} holds a Hearth token: {tape}"
            );
        }
    }
}
