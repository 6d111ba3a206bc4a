//! The Kubernetes manifests, run as they are written. No API server can run
//! here, so the test renders `deploy/kubernetes/overlays/dev` with `kubectl
//! kustomize` and starts, as local processes on loopback with a real
//! PostgreSQL, exactly the command, arguments and environment the rendered
//! Deployment and DaemonSet give their containers (secrets and config maps
//! read from the rendered objects): two gateways and three nodes. What
//! Kubernetes would supply is filled in as a kubelet would: each pod's
//! address (the downward API's `status.podIP`, a loopback address of its
//! own; a pod listening on every address listens on that one), the
//! container's memory limit, the data volume (a directory of its own), and
//! the store's Service (the test's PostgreSQL, over TLS verified as the
//! manifests ask). Nodes run as their container would: root holding only
//! the capabilities the DaemonSet adds, under its seccomp profile
//! (`crate::pod_security`); AppArmor is not on this machine (the VM test
//! checks the profile). Probes are the manifests' own paths; a gateway
//! stops as the manifests stop it (out of the Service, its `preStop`,
//! SIGTERM, SIGKILL after the grace period).

use hearth_test_support::require;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use hearth_test_support::TempPostgres;
use serde::Deserialize as _;
use serde_yaml::Value;

use crate::harness::{HEARTH, remove_leftovers_of_killed, until};
use crate::pod_security::PodSecurity;

/// Every object `kubectl kustomize` renders of `overlay`.
fn render(overlay: &str) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/overlays");
    if overlay == "dev" {
        // Its secrets, made at random as a user makes them (once).
        let made = Command::new(dir.join("dev/secrets.sh")).output().unwrap();
        assert!(made.status.success(), "{made:?}");
    }
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir.join(overlay))
        .output()
        .expect("kubectl (scripts/kubernetes-tools.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect()
}

/// The object of `kind` named `name`, or generated from that name
/// (kustomize adds a hash of the content: `hearth-secrets-5bcm77c742`).
fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let generated = format!("{name}-");
    objects
        .iter()
        .find(|o| {
            let n = o["metadata"]["name"].as_str().unwrap_or_default();
            o["kind"] == kind
                && (n == name
                    || n.strip_prefix(&generated)
                        .is_some_and(|h| h.len() == 10 && !h.contains('-')))
        })
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// A Secret's or ConfigMap's data, decoded.
fn data(objects: &[Value], kind: &str, name: &str) -> BTreeMap<String, String> {
    let o = find(objects, kind, name);
    let mut out = BTreeMap::new();
    if let Some(map) = o["data"].as_mapping() {
        for (k, v) in map {
            let v = v.as_str().unwrap().replace(['\n', ' '], "");
            let v = if kind == "Secret" {
                String::from_utf8(base64::engine::general_purpose::STANDARD.decode(v).unwrap())
                    .unwrap()
            } else {
                v.to_string()
            };
            out.insert(k.as_str().unwrap().to_string(), v);
        }
    }
    out
}

/// MiB in a quantity such as `2Gi` or `512Mi`.
fn mib(quantity: &str) -> u64 {
    let (n, unit) = quantity.split_at(quantity.find(|c: char| !c.is_ascii_digit()).unwrap());
    let n: u64 = n.parse().unwrap();
    match unit {
        "Gi" => n * 1024,
        "Mi" => n,
        other => panic!("unit {other}"),
    }
}

/// One container as the manifests give it.
struct Spec {
    command: Vec<String>,
    args: Vec<String>,
    /// In the order Kubernetes sets it: `envFrom`, then `env`.
    env: Vec<(String, String)>,
    /// Volume name → where the container mounts it.
    mounts: Vec<(String, String)>,
    /// The readiness probe's path and port.
    readiness: (String, u16),
    grace: Duration,
    pre_stop: Option<Duration>,
    /// The capabilities and seccomp profile it runs under, if it keeps any.
    security: Option<PodSecurity>,
}

/// The first container of `kind`/`name`, its environment resolved as a
/// kubelet resolves it for a pod at `pod_ip`.
fn spec(objects: &[Value], kind: &str, name: &str, pod_ip: &str) -> Spec {
    let pod = &find(objects, kind, name)["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let strings = |v: &Value| -> Vec<String> {
        v.as_sequence()
            .map(|s| s.iter().map(|x| x.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let mut env: Vec<(String, String)> = Vec::new();
    for from in c["envFrom"].as_sequence().into_iter().flatten() {
        let map = from["configMapRef"]["name"].as_str().unwrap();
        env.extend(data(objects, "ConfigMap", map));
    }
    for e in c["env"].as_sequence().unwrap() {
        let key = e["name"].as_str().unwrap().to_string();
        let from = &e["valueFrom"];
        let value = if let Some(v) = e["value"].as_str() {
            v.to_string()
        } else if from["fieldRef"]["fieldPath"] == "status.podIP" {
            pod_ip.to_string()
        } else if let Some(r) = from["resourceFieldRef"].as_mapping() {
            let r = Value::Mapping(r.clone());
            assert_eq!(r["resource"], "limits.memory");
            assert_eq!(r["divisor"], "1Mi");
            mib(c["resources"]["limits"]["memory"].as_str().unwrap()).to_string()
        } else if let Some(s) = from["secretKeyRef"].as_mapping() {
            let s = Value::Mapping(s.clone());
            data(objects, "Secret", s["name"].as_str().unwrap())[s["key"].as_str().unwrap()].clone()
        } else {
            panic!("an env entry the test cannot fill in: {e:?}");
        };
        env.retain(|(k, _)| *k != key);
        env.push((key, value));
    }
    // `$(VAR)` in arguments is the container's variable, as Kubernetes
    // expands it.
    let expand = |s: &String| {
        let mut s = s.clone();
        for (k, v) in &env {
            s = s.replace(&format!("$({k})"), v);
        }
        s
    };
    let mounts = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| {
            let (name, path) = (
                m["name"].as_str().unwrap(),
                m["mountPath"].as_str().unwrap(),
            );
            (name.to_string(), path.to_string())
        })
        .collect();
    // A named port is one of the container's.
    let probe = &c["readinessProbe"]["httpGet"];
    let port = match probe["port"].as_u64() {
        Some(n) => n as u16,
        None => c["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|p| p["name"] == probe["port"])
            .unwrap()["containerPort"]
            .as_u64()
            .unwrap() as u16,
    };
    let pre_stop = c["lifecycle"]["preStop"].as_mapping().map(|_| {
        let seconds = &c["lifecycle"]["preStop"]["sleep"]["seconds"];
        Duration::from_secs(seconds.as_u64().expect("a preStop the test knows: sleep"))
    });
    // A container that keeps capabilities runs under its seccomp profile
    // and those alone; one that drops them all runs as the test does
    // (it could not hold a capability to misuse).
    let security = c["securityContext"]["capabilities"]["add"]
        .as_sequence()
        .is_some()
        .then(|| PodSecurity::of_container(c));
    Spec {
        command: strings(&c["command"]).iter().map(expand).collect(),
        args: strings(&c["args"]).iter().map(expand).collect(),
        env,
        mounts,
        readiness: (probe["path"].as_str().unwrap().to_string(), port),
        grace: Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap()),
        pre_stop,
        security,
    }
}

/// A container started as its spec says, on this machine.
struct Pod {
    child: Child,
    /// Its data volume and log; `None` once handed to the pod that
    /// replaces it.
    dir: Option<tempfile::TempDir>,
    url: String,
    pod_ip: String,
    spec: Spec,
}

impl Pod {
    /// Starts `spec` on `dir` (its data volume, as a hostPath keeps it
    /// for the pod that replaces it), with `store` for the store's
    /// Service, `tls` for the `hearth-tls` Secret's volume, and nothing of
    /// this process's environment but `PATH`.
    fn start_in(dir: tempfile::TempDir, spec: Spec, pod_ip: &str, store: &str, tls: &Path) -> Pod {
        let data = dir.path().join("data");
        assert_eq!(spec.command, ["hearth"], "the image's entry point");
        // Mount paths become this machine's directories, in arguments and
        // variables alike.
        let local = |s: &str| {
            let mut s = s.to_string();
            for (volume, path) in &spec.mounts {
                let to = match volume.as_str() {
                    "data" => data.clone(),
                    "tls" => tls.to_path_buf(),
                    // Scratch space is this machine's own.
                    _ => continue,
                };
                s = s.replace(path.as_str(), to.to_str().unwrap());
            }
            // A pod's network namespace has one address, its own; here the
            // pods share the machine's, so "every address" is the pod's.
            for any in ["[::]:", "0.0.0.0:"] {
                if let Some(port) = s.strip_prefix(any) {
                    s = format!("{pod_ip}:{port}");
                }
            }
            s
        };
        let args: Vec<String> = spec.args.iter().map(|a| local(a)).collect();
        let mut cmd = match &spec.security {
            Some(security) => security.command(HEARTH),
            None => Command::new(HEARTH),
        };
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("log")).unwrap());
        for (k, v) in &spec.env {
            let v = if k == "HEARTH_STORE" {
                store.to_string()
            } else {
                local(v)
            };
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let tls = args.iter().any(|a| a.starts_with("https://"));
        let scheme = if tls { "https" } else { "http" };
        Pod {
            child,
            dir: Some(dir),
            url: format!("{scheme}://{pod_ip}:8080"),
            pod_ip: pod_ip.to_string(),
            spec,
        }
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("not replaced").path()
    }

    /// Its data directory, for the pod that replaces it (once it exited).
    fn hand_over(mut self) -> tempfile::TempDir {
        assert!(self.child.try_wait().unwrap().is_some(), "still running");
        self.dir.take().unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("log")).unwrap_or_default()
    }

    /// Waits until the readiness probe passes.
    async fn ready(&mut self, http: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (path, port) = &self.spec.readiness;
            let probe = format!("http://{}:{port}{path}", self.pod_ip);
            if let Ok(r) = http.get(&probe).send().await
                && r.status() == 200
            {
                return;
            }
            let exited = self.child.try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "{} not ready (exit {exited:?}):\n{}",
                self.url,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops it as the kubelet does: SIGTERM, then SIGKILL once the grace
    /// period is over. How long it took to exit.
    async fn terminate(&mut self) -> Duration {
        let start = Instant::now();
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        while self.child.try_wait().unwrap().is_none() {
            if start.elapsed() > self.spec.grace {
                self.child.kill().unwrap();
                self.child.wait().unwrap();
                remove_leftovers_of_killed(&self.dir().join("data"));
                panic!("{} outlived its grace period:\n{}", self.url, self.log());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        start.elapsed()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: as above.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(dir) = &self.dir {
            remove_leftovers_of_killed(&dir.path().join("data"));
        }
    }
}

/// Reads a key, waits ~50 ms, writes it one higher: run twice for one key,
/// it answers 2.
const EFFECT: &str = r#"
export default {
  async fetch(request) {
    const key = await request.text();
    const n = Number((await hearth.kv.get(key)) ?? 0) + 1;
    await new Promise((r) => setTimeout(r, 50));
    await hearth.kv.set(key, String(n));
    return new Response(String(n));
  },
};
"#;

/// What the clients saw.
#[derive(Default)]
struct Tally {
    acknowledged: Vec<String>,
    /// Answered after the gateway's one retry on another node.
    retried: u32,
    /// Sent, and then the connection failed: may or may not have run.
    lost: Vec<String>,
    /// Answered with an error status.
    failed: Vec<(String, u16, String)>,
    /// Connections refused by a gateway, sent again to the other.
    refused: u32,
}

/// Waits until the load has had `n` more writes acknowledged: it is
/// running, through whatever the Service lists now.
async fn until_acknowledged(tally: &parking_lot::Mutex<Tally>, n: usize) {
    let from = tally.lock().acknowledged.len();
    until(
        &format!("{n} more writes acknowledged"),
        Duration::from_secs(60),
        async || tally.lock().acknowledged.len() >= from + n,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dev_overlay_loses_nothing_when_a_node_is_upgraded_and_a_gateway_stops() {
    require!(Postgres, Kubectl, Python, Node, Seccomp);
    let objects = render("dev");
    // The Secret deploy/kubernetes/tls.sh makes, as its volume holds it.
    let tls = tempfile::tempdir().unwrap();
    crate::cluster::member_certs(tls.path());
    // The store over TLS, verified as the manifests ask: verify-full
    // against a CA from a mounted Secret. Here the server is the test's
    // (its certificate for localhost, its own CA) in place of the
    // hearth-postgres Service.
    let asked = data(&objects, "Secret", "hearth-secrets")["store-url"].clone();
    assert!(
        asked.contains("sslmode=verify-full") && asked.contains("sslrootcert=/etc/hearth/tls/"),
        "{asked}"
    );
    let nodes_asked = data(&objects, "Secret", "hearth-node-secrets")["store-url"].clone();
    assert!(
        nodes_asked.starts_with("postgres://hearth_node:"),
        "nodes connect as their own role: {nodes_asked}"
    );
    let pg = TempPostgres::start_tls().unwrap();
    pg.create_database("hearth").unwrap();
    // The nodes' role, as the dev PostgreSQL's initdb/nodes.sh makes it;
    // gateways grant it a node's share (--store-node-role).
    pg.execute_as("hearth", "hearth", "CREATE ROLE hearth_node LOGIN")
        .unwrap();
    // A pod's store: the test's server, as the role its Secret's URL names.
    let store_for = |spec: &Spec| {
        let asked = &spec
            .env
            .iter()
            .find(|(k, _)| k == "HEARTH_STORE")
            .unwrap()
            .1;
        let user = asked
            .strip_prefix("postgres://")
            .and_then(|rest| rest.split([':', '@']).next())
            .unwrap();
        format!(
            "postgres://{user}@localhost:{}/hearth?sslmode=verify-full&sslrootcert={}",
            pg.port(),
            pg.ca().display()
        )
    };
    let replicas = find(&objects, "Deployment", "hearth-gateway")["spec"]["replicas"]
        .as_u64()
        .unwrap();
    assert_eq!(replicas, 2, "the dev overlay's gateways");
    // The pod of `kind`/`name` at 127.0.32.`n`, on data of its own or on
    // `data` (a replacement on the same machine).
    let pod = |kind: &str, name: &str, n: u32, data: Option<tempfile::TempDir>| {
        let ip = format!("127.0.32.{n}");
        let spec = spec(&objects, kind, name, &ip);
        let store = store_for(&spec);
        let data = data.unwrap_or_else(|| tempfile::tempdir().unwrap());
        Pod::start_in(data, spec, &ip, &store, tls.path())
    };
    let mut gateways: Vec<Pod> = (10..12)
        .map(|n| pod("Deployment", "hearth-gateway", n, None))
        .collect();
    let mut nodes: Vec<Pod> = (20..23)
        .map(|n| pod("DaemonSet", "hearth-node", n, None))
        .collect();
    let http = reqwest::Client::new();
    for p in gateways.iter_mut().chain(nodes.iter_mut()) {
        p.ready(&http).await;
    }
    let token = data(&objects, "Secret", "hearth-secrets")["admin-token"].clone();
    let (a, b) = (gateways[0].url.clone(), gateways[1].url.clone());
    let get = |path: String| {
        let (http, token) = (http.clone(), token.clone());
        async move {
            let r = http.get(path).bearer_auth(&token).send().await.unwrap();
            r.json::<serde_json::Value>().await.unwrap()
        }
    };

    // Every gateway knows every node, from the nodes' rows.
    for g in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = get(format!("{g}/v1/cluster/nodes")).await;
            let alive = v["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["alive"] == true)
                .count();
            if alive == 3 {
                break;
            }
            assert!(Instant::now() < deadline, "{v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // A deploy through one gateway is served by the other.
    let deployed = http
        .post(format!("{a}/v1/functions/effect"))
        .query(&[("runtime", "js"), ("file_name", "index.mjs")])
        .bearer_auth(&token)
        .body(EFFECT)
        .send()
        .await
        .unwrap();
    assert_eq!(deployed.status(), 201, "{}", deployed.text().await.unwrap());
    let at = Instant::now();
    let serving = loop {
        let r = http
            .post(format!("{b}/fn/admin/effect"))
            .bearer_auth(&token)
            .body("warm")
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            break r.headers()["hearth-node"].to_str().unwrap().to_string();
        }
        assert!(at.elapsed() < Duration::from_secs(10), "{}", r.status());
    };
    eprintln!(
        "figure: a deploy through gateway A answered through gateway B after {:?}",
        at.elapsed()
    );
    // The process tier, which is what the nodes' privileges are for, runs
    // under their capabilities and seccomp profile: Python and Node.js.
    for (name, file, runtime, code) in [
        (
            "py",
            "handler.py",
            "python",
            "def handler(event, context):\n    return {'statusCode': 200, 'body': 'py'}\n",
        ),
        (
            "nd",
            "index.js",
            "node",
            "exports.handler = async () => ({ statusCode: 200, body: 'nd' });\n",
        ),
    ] {
        let r = http
            .post(format!("{a}/v1/functions/{name}"))
            .query(&[("runtime", runtime), ("file_name", file)])
            .bearer_auth(&token)
            .body(code)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
        let r = http
            .post(format!("{b}/fn/admin/{name}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let (status, body) = (r.status(), r.text().await.unwrap());
        assert_eq!((status.as_u16(), body.as_str()), (200, name), "{name}");
    }

    // Bounded load: four clients, each one request at a time, each request
    // a key of its own, to the gateways the Service lists.
    let endpoints = Arc::new(parking_lot::Mutex::new(vec![a.clone(), b.clone()]));
    let tally = Arc::new(parking_lot::Mutex::new(Tally::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (endpoints, tally, stop, http, token) = (
                endpoints.clone(),
                tally.clone(),
                stop.clone(),
                http.clone(),
                token.clone(),
            );
            tokio::spawn(async move {
                let mut i = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    i += 1;
                    let key = format!("c{c}-{i}");
                    let mut attempt = 0;
                    loop {
                        let list = endpoints.lock().clone();
                        let g = &list[(i as usize + attempt) % list.len()];
                        let sent = http
                            .post(format!("{g}/fn/admin/effect"))
                            .bearer_auth(&token)
                            .body(key.clone())
                            .timeout(Duration::from_secs(30))
                            .send()
                            .await;
                        match sent {
                            Err(e) if e.is_connect() && attempt < 3 => {
                                // Never reached the gateway: safe to send again.
                                tally.lock().refused += 1;
                                attempt += 1;
                                continue;
                            }
                            Err(_) => tally.lock().lost.push(key.clone()),
                            Ok(r) => {
                                let status = r.status().as_u16();
                                let retried = r.headers().contains_key("hearth-retried-from");
                                let body = r.text().await.unwrap_or_default();
                                let mut t = tally.lock();
                                t.retried += u32::from(retried);
                                if status == 200 && body == "1" {
                                    t.acknowledged.push(key.clone());
                                } else {
                                    t.failed.push((key.clone(), status, body));
                                }
                            }
                        }
                        break;
                    }
                }
            })
        })
        .collect();
    until_acknowledged(&tally, 8).await;

    // The node running the function is stopped: it leaves, finishes what
    // it runs, exits; then its replacement starts, as in a rolling update.
    let members = get(format!("{b}/v1/cluster/nodes")).await;
    let victim_url = members["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == serving.as_str())
        .unwrap()["url"]
        .as_str()
        .unwrap()
        .to_string();
    let victim = nodes.iter().position(|n| n.url == victim_url).unwrap();
    let node_exit = nodes[victim].terminate().await;
    eprintln!("figure: node SIGTERM to exit {node_exit:?}");
    // The DaemonSet's rolling update starts its replacement on the same
    // machine: same address, same hostPath data, the load still running.
    let old = nodes.remove(victim);
    let n: u32 = old.pod_ip.rsplit('.').next().unwrap().parse().unwrap();
    nodes.push(pod("DaemonSet", "hearth-node", n, Some(old.hand_over())));
    let started = Instant::now();
    nodes.last_mut().unwrap().ready(&http).await;
    eprintln!(
        "figure: the replacement node ready {:?} after start",
        started.elapsed()
    );
    until_acknowledged(&tally, 8).await;

    // A gateway is stopped as the manifests stop it: out of the Service,
    // its preStop, then SIGTERM (SIGKILL after the grace period).
    endpoints.lock().retain(|g| *g != a);
    if let Some(wait) = gateways[0].spec.pre_stop {
        tokio::time::sleep(wait).await;
    }
    let gateway_exit = gateways[0].terminate().await;
    eprintln!("figure: gateway SIGTERM to exit {gateway_exit:?}");
    until_acknowledged(&tally, 8).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    for c in clients {
        c.await.unwrap();
    }

    let t = std::mem::take(&mut *tally.lock());
    eprintln!(
        "figure: {} requests acknowledged ({} after a gateway's retry), {} lost, {} failed, {} connections refused and sent again",
        t.acknowledged.len(),
        t.retried,
        t.lost.len(),
        t.failed.len(),
        t.refused
    );
    assert!(t.lost.is_empty(), "lost: {:?}", t.lost);
    assert!(t.failed.is_empty(), "failed: {:?}", t.failed);
    assert!(
        t.acknowledged.len() > 20,
        "too little load: {}",
        t.acknowledged.len()
    );
    // No effect ran twice: every key the clients were answered for holds 1.
    for key in &t.acknowledged {
        let v = http
            .get(format!("{b}/v1/functions/effect/kv/{key}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(v.status(), 200, "{key}");
        assert_eq!(v.text().await.unwrap(), "1", "{key} ran more than once");
    }
    // The replacement is in placement under an id of its own, and serves
    // the tapes its predecessor made: the hostPath kept them.
    let v = get(format!("{b}/v1/cluster/nodes")).await;
    let back = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["url"] == victim_url.as_str())
        .unwrap()
        .clone();
    assert_eq!(back["alive"], true, "{v}");
    assert_ne!(back["id"], serving.as_str(), "{v}");
    let tapes = get(format!("{b}/v1/functions/effect/recordings?limit=1000")).await;
    let kept = tapes["recordings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["node"] == back["id"])
        .count();
    eprintln!("figure: {kept} tapes made before the upgrade served by the replacement");
    assert!(kept > 0, "{tapes}");
    assert_eq!(
        tapes["away"],
        serde_json::json!([]),
        "the replacement serves them: {tapes}"
    );
    drop(nodes);
    drop(gateways);
}

/// The node's seccomp profile is what its generator writes from the lists
/// that justify it: nobody edited the JSON by hand, and the generator was
/// run after its lists changed.
#[test]
fn the_node_seccomp_profile_is_what_its_generator_writes() {
    require!(Seccomp);
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/profiles");
    let out = tempfile::tempdir().unwrap();
    let written = out.path().join("hearth-node.json");
    let run = Command::new("/usr/bin/python3")
        .arg(profiles.join("generate-seccomp.py"))
        .arg(&written)
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        std::fs::read_to_string(profiles.join("hearth-node.json")).unwrap(),
        "run deploy/kubernetes/profiles/generate-seccomp.py and commit hearth-node.json"
    );
}
