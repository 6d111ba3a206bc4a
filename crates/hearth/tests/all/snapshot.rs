//! Wasm snapshots: a module's init step runs once at deploy, and every
//! invocation, also after a restart, starts from the initialized state.

use crate::harness::{Daemon, error_of, example};

#[tokio::test]
async fn a_module_with_an_init_step_is_served_from_its_snapshot_across_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = Daemon::start_in(&dir, &[]);
    d.deploy("preinit", example("preinit.wat"), &[]).await;
    for _ in 0..2 {
        assert_eq!(
            d.invoke_body("preinit", String::new()).await,
            "built at deploy\nruns=1\n"
        );
    }
    drop(d); // a graceful stop
    let d = Daemon::start_in(&dir, &[]);
    assert_eq!(
        d.invoke_body("preinit", String::new()).await,
        "built at deploy\nruns=1\n",
        "the stored artifact is the snapshot, not the module that was uploaded"
    );

    let trapping = br#"(module (memory (export "memory") 1)
        (func (export "wizer-initialize") unreachable) (func (export "_start")))"#;
    let (status, kind, msg) = error_of(d.deploy_raw("broken", trapping.to_vec(), &[]).await).await;
    assert_eq!(status, 400, "{kind}: {msg}");
    assert!(msg.contains("init step"), "{msg}");
}
