//! A node killed outright comes back quickly, and takes nothing of its
//! dead self's sandboxes with it.

use hearth_test_support::require;
use std::time::{Duration, Instant};

use crate::harness::{Daemon, instance_dir};

/// Processes in this node's sandbox cgroups, and whether any of those
/// groups is frozen (a paused handler).
fn sandboxes(data: &std::path::Path) -> (Vec<i32>, bool) {
    let mut pids = Vec::new();
    let mut frozen = false;
    for controller in ["memory", ""] {
        let dir = instance_dir(data, controller);
        for group in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let procs =
                std::fs::read_to_string(group.path().join("cgroup.procs")).unwrap_or_default();
            pids.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
    }
    let freezer = instance_dir(data, "freezer");
    for group in std::fs::read_dir(&freezer).into_iter().flatten().flatten() {
        let state = std::fs::read_to_string(group.path().join("freezer.state")).unwrap_or_default();
        frozen |= state.trim() == "FROZEN";
    }
    (pids, frozen)
}

/// Running or sleeping; not gone, not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

#[tokio::test]
async fn a_node_killed_with_paused_handlers_listens_within_5_s_with_them_reaped() {
    require!(Python);
    let mut d = Daemon::start();
    for i in 0..3 {
        let name = format!("paused{i}");
        d.deploy(
            &name,
            b"def handler(event, context):\n    return 'ok'\n".to_vec(),
            &[("runtime", "python"), ("file_name", "handler.py")],
        )
        .await;
        assert_eq!(d.invoke_body(&name, String::new()).await, "ok");
    }
    // Handlers are paused (frozen) between invocations.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (pids, frozen) = loop {
        let (pids, frozen) = sandboxes(&d.dir);
        if frozen || Instant::now() > deadline {
            break (pids, frozen);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!pids.is_empty(), "no sandbox processes to leave behind");
    let v1 = instance_dir(&d.dir, "freezer").exists();
    assert!(frozen || !v1, "no handler was paused");

    d.kill9();
    let started = Instant::now();
    let again = Daemon::start_in(&d.dir, &[]);
    let took = started.elapsed();
    eprintln!(
        "listening again {took:?} after kill -9 ({} sandbox processes left)",
        pids.len()
    );
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} to listen again"
    );
    for pid in &pids {
        assert!(
            !alive(*pid),
            "sandbox process {pid} of the killed node survived the restart"
        );
    }
    assert_eq!(again.invoke_body("paused0", String::new()).await, "ok");
}
