//! `kill -9` during deploys and invocations, then restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::{Daemon, JsonExt};

/// hello.wat with a different greeting, so each deploy is a new artifact.
fn variant(i: usize) -> Vec<u8> {
    let greeting = format!("hello number {i:06}\n");
    format!(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{greeting}")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const {len}))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#,
        greeting = greeting.trim_end().to_string() + "\\n",
        len = greeting.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn kill_9_during_deploys_and_invocations_loses_nothing_completed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut d = Daemon::start_in(&dir, &[]);
    // name -> (version, i) of every deploy the server acknowledged.
    let acked: Arc<Mutex<BTreeMap<String, (u64, usize)>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..3 {
        let (http, url, token, acked) = (
            d.http.clone(),
            d.url.clone(),
            d.token.clone(),
            acked.clone(),
        );
        workers.push(tokio::spawn(async move {
            for i in (w * 1000).. {
                let name = format!("f{}", i % 5 + w * 5);
                let resp = http
                    .post(format!("{url}/v1/functions/{name}?runtime=wasm"))
                    .bearer_auth(&token)
                    .body(variant(i))
                    .send()
                    .await;
                let Ok(resp) = resp else { break };
                if resp.status() != 201 {
                    break;
                }
                let Ok(v) = resp.json::<serde_json::Value>().await else {
                    break;
                };
                acked
                    .lock()
                    .unwrap()
                    .insert(name.clone(), (v["version"].as_u64().unwrap(), i));
                let _ = http
                    .post(format!("{url}/fn/admin/{name}"))
                    .bearer_auth(&token)
                    .send()
                    .await;
            }
        }));
    }
    // Killed mid-load: once every one of the 15 names has a deploy
    // acknowledged (and the workers are deploying more).
    crate::harness::until(
        "15 deploys acknowledged",
        Duration::from_secs(60),
        async || acked.lock().unwrap().len() >= 15,
    )
    .await;
    d.kill9();
    for w in workers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    let d = Daemon::start_in(&dir, &[]);
    for (name, (version, i)) in &acked {
        let fv: serde_json::Value = d.get(&format!("/v1/functions/{name}")).json_value().await;
        let versions = fv["versions"].as_array().unwrap();
        assert!(
            versions
                .iter()
                .any(|v| v["version"].as_u64() == Some(*version)),
            "{name} v{version} was acknowledged but is gone: {fv}"
        );
        let resp = d
            .post(&format!("/fn/admin/{name}@{version}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name} v{version}");
        assert_eq!(resp.text().await.unwrap(), format!("hello number {i:06}\n"));
        // Whatever is newest (perhaps a deploy committed but not acknowledged) also runs.
        let newest = d.post(&format!("/fn/admin/{name}")).send().await.unwrap();
        assert_eq!(newest.status(), 200, "{name} newest");
        assert!(newest.text().await.unwrap().starts_with("hello number "));
    }
    assert_eq!(
        std::fs::read_dir(dir.join("artifacts/tmp"))
            .unwrap()
            .count(),
        0,
        "abandoned writes are swept"
    );
}
