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
