//! A tenant's secrets: no other tenant reads, binds or learns of one;
//! none is stored, taped or listed in the clear; each is bounded.

use crate::harness::{Daemon, error_of};

const ECHO_SECRET: &str =
    "export default { fetch(req, env) { return new Response('key=' + env.API_KEY); } };";

async fn put_secret(d: &Daemon, token: &str, name: &str, value: &[u8]) -> reqwest::Response {
    d.http
        .put(format!("{}/v1/secrets/{name}", d.url))
        .bearer_auth(token)
        .body(value.to_vec())
        .send()
        .await
        .unwrap()
}

async fn deploy_echo(d: &Daemon, token: &str, name: &str, secret: &str) -> reqwest::Response {
    d.deploy_as(
        token,
        name,
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("secret", &format!("API_KEY={secret}")),
        ],
        ECHO_SECRET.as_bytes().to_vec(),
    )
    .await
}

#[tokio::test]
async fn another_tenant_cannot_read_bind_or_learn_of_a_secret() {
    let d = Daemon::start();
    let beta = d.create_tenant("beta").await;
    assert_eq!(
        put_secret(&d, &d.token, "DB", b"admins-value")
            .await
            .status(),
        200
    );

    // Binding admin's DB from beta is refused exactly as binding a name
    // nobody has: beta cannot tell that it exists.
    let (code, _, taken) = error_of(deploy_echo(&d, &beta, "f", "DB").await).await;
    let (code2, _, nobody) = error_of(deploy_echo(&d, &beta, "f", "NOBODY").await).await;
    assert_eq!((code, code2), (400, 400));
    assert_eq!(taken.replace("DB", "X"), nobody.replace("NOBODY", "X"));
    let listed = d.get_json_as(&beta, "/v1/secrets").await;
    assert_eq!(listed["secrets"], serde_json::json!([]), "{listed}");
    let r = d
        .http
        .delete(format!("{}/v1/secrets/DB", d.url))
        .bearer_auth(&beta)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "beta removes nothing of admin's");

    // beta's own DB is its own: its function sees its value, admin's
    // function admin's.
    assert_eq!(
        put_secret(&d, &beta, "DB", b"betas-value").await.status(),
        200
    );
    assert_eq!(deploy_echo(&d, &beta, "f", "DB").await.status(), 201);
    assert_eq!(deploy_echo(&d, &d.token, "f", "DB").await.status(), 201);
    let r = d.invoke_as(&beta, "beta", "f").send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "key=betas-value");
    assert_eq!(d.invoke_body("f", String::new()).await, "key=admins-value");

    // A token that may only read cannot set one.
    let reader: serde_json::Value = d
        .post("/v1/tokens")
        .json(&serde_json::json!({"scope": "read"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reader = reader["token"].as_str().unwrap();
    assert_eq!(put_secret(&d, reader, "DB", b"x").await.status(), 403);
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                // The process tier's sandbox roots are the host's files.
                if !path.ends_with("proc") {
                    stack.push(path);
                }
            } else if kind.is_file()
                && std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test]
async fn a_secret_is_sealed_at_rest_and_on_its_tapes_and_bounded() {
    let d = Daemon::start();
    let value = b"s3cr3t-8c1f0e";
    assert_eq!(put_secret(&d, &d.token, "API", value).await.status(), 200);
    assert_eq!(deploy_echo(&d, &d.token, "leak", "API").await.status(), 201);
    // The function answers its own secret: its choice, and its tape
    // (which holds that answer) is sealed as every tape is.
    assert_eq!(
        d.invoke_body("leak", String::new()).await,
        "key=s3cr3t-8c1f0e"
    );
    d.newest_tape("leak", 1).await;
    let logs = d.get_text("/v1/functions/leak/logs").await;
    assert!(!logs.contains("s3cr3t"), "{logs}");
    let held = files_holding(&d.dir, value);
    assert!(held.is_empty(), "the value in the clear in {held:?}");

    // Bounds, each named: a name no variable can have, a value past 4
    // KiB or one no variable can hold, and the tenant's 101st.
    let bad_name = put_secret(&d, &d.token, "not-a-var", b"x").await;
    assert_eq!(bad_name.status(), 400);
    assert_eq!(
        put_secret(&d, &d.token, "BIG", &[b'x'; 4097])
            .await
            .status(),
        413
    );
    let (code, _, message) = error_of(put_secret(&d, &d.token, "NUL", b"a\0b").await).await;
    assert_eq!(code, 400);
    assert!(message.contains("NUL"), "{message}");
    for i in 1..hearth_store::MAX_SECRETS_PER_TENANT {
        let r = put_secret(&d, &d.token, &format!("S{i}"), b"x").await;
        assert_eq!(r.status(), 200);
    }
    let (code, _, message) = error_of(put_secret(&d, &d.token, "ONE_MORE", b"x").await).await;
    assert_eq!(code, 409);
    assert!(message.contains("hearth secret rm"), "{message}");
}
