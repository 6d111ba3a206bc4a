//! The tape and the world agree: no effect lands that the tape lacks.

use crate::harness::Daemon;

/// Starts a KV write and answers without waiting for it.
const FORGETFUL: &str = "export default { async fetch() { \
    hearth.kv.set('late', 'landed'); \
    return new Response('answered'); } };";

/// Reads what the first left.
const READER: &str = "export default { async fetch() { \
    return new Response((await hearth.kv.get('late')) ?? 'absent'); } };";

#[tokio::test]
async fn a_write_the_function_did_not_await_is_on_its_tape_or_never_happens() {
    let d = Daemon::start();
    let js = [("runtime", "js"), ("file_name", "index.mjs")];
    d.deploy("forgetful", FORGETFUL.as_bytes().to_vec(), &js)
        .await;
    assert_eq!(d.invoke_body("forgetful", String::new()).await, "answered");
    let id = d.newest_tape("forgetful", 1).await;
    let tape = d.get_json(&format!("/v1/recordings/{id}")).await;
    let on_tape = tape["calls"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["call"].as_str().unwrap().starts_with("kv.set \"late\""));
    // KV is per function: read it the way the function would, with a
    // second version of it.
    d.deploy("forgetful", READER.as_bytes().to_vec(), &js).await;
    let landed = d.invoke_body("forgetful", String::new()).await == "landed";
    assert_eq!(
        (on_tape, landed),
        (true, true),
        "the write landed: {landed}; it is on the tape: {on_tape}"
    );
}
