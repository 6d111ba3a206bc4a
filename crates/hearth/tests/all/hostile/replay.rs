//! A replay runs apart from production: it neither sees nor changes the
//! state of the instances that serve traffic.

use crate::harness::Daemon;

/// Each counts its invocations in a global: state a warm instance keeps.
const COUNTERS: &[(&str, &str, &str, &str)] = &[
    (
        "js",
        "index.mjs",
        "js",
        "let n = 0;\nexport default { fetch() { n += 1; return new Response(String(n)); } };\n",
    ),
    (
        "node",
        "index.js",
        "node",
        "let n = 0;\nexports.handler = async () => { n += 1; return String(n); };\n",
    ),
    (
        "py",
        "handler.py",
        "python",
        "n = 0\ndef handler(event, context):\n    global n\n    n += 1\n    return str(n)\n",
    ),
];

#[tokio::test]
async fn replays_run_in_instances_of_their_own() {
    let d = Daemon::start();
    for (name, file, runtime, code) in COUNTERS {
        d.deploy(
            name,
            code.as_bytes().to_vec(),
            &[("runtime", runtime), ("file_name", file)],
        )
        .await;
        assert_eq!(d.invoke_body(name, String::new()).await, "1", "{name}");
        assert_eq!(d.invoke_body(name, String::new()).await, "2", "{name}");
        let id = d.newest_tape(name, 2).await;
        for _ in 0..2 {
            let report = d.replay(&id).await;
            let body = report["replayed"]["body"]["text"].as_str().unwrap();
            assert_eq!(
                body, "1",
                "{name}: the replay ran in a warm instance: {report}"
            );
        }
        assert_eq!(
            d.invoke_body(name, String::new()).await,
            "3",
            "{name}: the replays changed the live instance"
        );
    }
}

/// A tape file posted to `/v1/replay` is bounded by what this node would
/// record itself, before a byte of it is decoded: its size (a 413 while it
/// arrives) and its host calls (counted without keeping them). Without the
/// bounds, a 60 MiB crafted tape cost ~560 MB and 7.7 s of CPU to refuse.
#[tokio::test]
async fn a_crafted_tape_is_refused_by_size_and_host_calls_before_it_is_decoded() {
    use sha2::Digest;
    let kib64 = "65536";
    let d = Daemon::start_with(&[
        "--max-body-bytes",
        kib64,
        "--max-response-bytes",
        kib64,
        "--max-tape-bytes",
        kib64,
    ]);
    // 3 × 64 KiB as base64 and 1 MiB of room: ~1.25 MiB.
    let big = vec![b' '; 2 << 20];
    let resp = d.post("/v1/replay").body(big).send().await.unwrap();
    let (status, _, msg) = crate::harness::error_of(resp).await;
    assert_eq!(status, 413, "{msg}");

    // A real tape, given 10,000 clock readings and a checksum that fits.
    assert_eq!(d.invoke_body("echo", "x".into()).await, "x");
    let id = d.newest_tape("echo", 1).await;
    let export = d
        .get(&format!("/v1/recordings/{id}/export"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let file: serde_json::Value = serde_json::from_slice(&export).unwrap();
    assert_eq!(file["format"], "hearth-tape/2", "{file}");
    assert!(
        file["recording"]["request"]["body"].is_string(),
        "bytes are base64: {file}"
    );
    let forge = |events: usize| {
        let mut recording = file["recording"].clone();
        recording["tape"]["events"] =
            serde_json::Value::Array(vec![serde_json::json!({"WallClock": {"nanos": 5}}); events]);
        let text = serde_json::to_string(&recording).unwrap();
        let checksum = hex(&sha2::Sha256::digest(text.as_bytes()));
        format!(r#"{{"format":"hearth-tape/2","checksum":"{checksum}","recording":{text}}}"#)
    };
    let resp = d
        .post("/v1/replay")
        .body(forge(10_000))
        .send()
        .await
        .unwrap();
    let (status, _, msg) = crate::harness::error_of(resp).await;
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("host calls"), "{msg}");
    // The same forgery within the bound is read (and replays: echo makes
    // no host call, so the extra readings are what differs).
    let resp = d.post("/v1/replay").body(forge(3)).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A replay runs the tenant's code, so it is admitted as an invocation
/// is: a tenant at its share of the node's slots cannot run more code by
/// replaying tapes (it is refused before anything runs), and replays
/// again once its slot is free.
#[tokio::test]
async fn a_replay_is_admitted_against_the_tenants_share() {
    let d = Daemon::start_with(&["--max-concurrency-per-tenant", "1"]);
    d.deploy("hello", crate::harness::example("hello.wat"), &[])
        .await;
    d.deploy(
        "spin",
        crate::harness::example("spin.wat"),
        &[("timeout_ms", "3000")],
    )
    .await;
    assert_eq!(d.invoke("hello", b"").await.status(), 200);
    let id = d.newest_tape("hello", 1).await;
    let spinning = tokio::spawn(d.post("/fn/admin/spin").send());
    d.until_in_flight(1).await;
    let resp = d
        .post(&format!("/v1/recordings/{id}/replay"))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let (_, kind, msg) = crate::harness::error_of(resp).await;
    assert_eq!(status, 503, "{kind}: {msg}");
    assert!(
        msg.contains("invocations running on this node, its share"),
        "{msg}"
    );
    spinning.await.unwrap().unwrap();
    let report = d.replay(&id).await;
    assert_eq!(report["identical"], true, "{report}");
}
