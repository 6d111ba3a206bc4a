//! Where a sandbox's network reaches: not the host, not other tenants.

use crate::harness::{Daemon, error_of};
use hearth_test_support::require;

/// Binds an abstract Unix socket when imported, so that it is held by
/// the paused handler between invocations.
const LISTENER: &str = "import socket\n\
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
    s.bind(b'\\0hearth-hostile-probe')\n\
    s.listen(8)\n\
    def handler(event, context):\n    return 'listening'\n";

/// Tries the other tenant's abstract socket, and lists its interfaces.
const DIALER: &str = "import errno, socket\n\
    def handler(event, context):\n    \
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    \
    try:\n        c.connect(b'\\0hearth-hostile-probe')\n        got = 'connected'\n    \
    except OSError as e:\n        got = errno.errorcode.get(e.errno, str(e.errno))\n    \
    names = ','.join(n for _, n in socket.if_nameindex())\n    \
    return got + ' ' + names\n";

#[tokio::test]
async fn a_sandbox_sees_no_host_interface_and_no_other_tenants_sockets() {
    require!(Python);
    let d = Daemon::start();
    let acme = d.create_tenant("acme").await;
    let beta = d.create_tenant("beta").await;
    let python = [("runtime", "python"), ("file_name", "handler.py")];
    for (token, name, code) in [(&acme, "listener", LISTENER), (&beta, "dialer", DIALER)] {
        let r = d.deploy_as(token, name, &python, code).await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    let call = |tenant: &str, name: &str, token: &str| d.invoke_as(token, tenant, name).send();
    let r = call("acme", "listener", &acme).await.unwrap();
    assert_eq!(r.text().await.unwrap(), "listening");
    let r = call("beta", "dialer", &beta).await.unwrap();
    let seen = r.text().await.unwrap();
    assert_eq!(
        seen, "ECONNREFUSED lo",
        "beta reached acme's socket or saw the host's interfaces"
    );
}

/// Fetches the URL in its request body; says what came back or why not.
const FETCHER: &str = "export default { async fetch(req) { \
    try { const r = await fetch(await req.text()); \
          return new Response('reached ' + r.status + ' ' + await r.text()); } \
    catch (e) { return new Response('refused: ' + e.message); } } };";

/// The machine's own name, which Debian's /etc/hosts maps to loopback: a
/// name that is not `localhost` and still leads back to this machine.
async fn own_name_and_address() -> (String, std::net::IpAddr) {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let addr = tokio::net::lookup_host((name.as_str(), 0))
        .await
        .ok()
        .and_then(|mut a| a.next())
        .map(|a| a.ip())
        .filter(|ip| ip.is_loopback())
        .unwrap_or_else(|| {
            panic!("this test needs the host name {name:?} to resolve to loopback, as Debian's /etc/hosts has it")
        });
    (name, addr)
}

#[tokio::test]
async fn fetch_never_reaches_this_machine_unless_the_operator_allows_it() {
    let d = Daemon::start();
    // Named by address, the daemon itself and a cloud's metadata service
    // are refused at deploy.
    let port = d.url.rsplit(':').next().unwrap().to_string();
    for host in [
        format!("127.0.0.1:{port}"),
        "169.254.169.254".into(),
        "localhost".into(),
        // The same in IPv6 transition forms (NAT64, 6to4, Teredo) that a
        // gateway on the way turns back into IPv4.
        "[64:ff9b::a9fe:a9fe]".into(),
        format!("[2002:7f00:1::]:{port}"),
        format!("[2001:0:4136:e378:8000:63bf:80ff:fffe]:{port}"),
    ] {
        let r = d
            .deploy_raw(
                "ssrf",
                FETCHER.as_bytes().to_vec(),
                &[
                    ("runtime", "js"),
                    ("file_name", "index.mjs"),
                    ("allow_host", &host),
                ],
            )
            .await;
        let (status, _, msg) = error_of(r).await;
        assert_eq!(status, 400, "{host}: {msg}");
        assert!(msg.contains("--allow-private-egress"), "{msg}");
    }
    // Named by a name that resolves to loopback, a service there is still
    // out of reach: the resolver drops the address.
    let (name, ip) = own_name_and_address().await;
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/secret", axum::routing::get(|| async { "host secret" }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let allowed = format!("{name}:{}", upstream.port());
    d.deploy(
        "ssrf",
        FETCHER.as_bytes().to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("allow_host", &allowed),
        ],
    )
    .await;
    let url = format!("http://{allowed}/secret");
    let seen = d.invoke_body("ssrf", url.clone()).await;
    assert!(
        seen.starts_with("refused") && seen.contains("loopback"),
        "{seen}"
    );
    // An operator who allows it gets it.
    let open = Daemon::start_with(&["--allow-private-egress", "true"]);
    open.deploy(
        "fetch",
        FETCHER.as_bytes().to_vec(),
        &[
            ("runtime", "js"),
            ("file_name", "index.mjs"),
            ("allow_host", &allowed),
        ],
    )
    .await;
    assert_eq!(
        open.invoke_body("fetch", url).await,
        "reached 200 host secret"
    );
}

/// A function that may reach `allowed` (and only that): opens a raw
/// socket to the daemon's own port, and fetches two URLs with `urllib`,
/// which follows the proxy variables; answers what happened to each.
fn egress_probe(daemon_port: u16, allowed: &str, other: &str) -> String {
    format!(
        r#"import errno, socket, urllib.request, urllib.error
def attempt(f):
    try:
        return f()
    except urllib.error.HTTPError as e:
        return 'http %d' % e.code
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
def raw():
    s = socket.create_connection(('127.0.0.1', {daemon_port}), timeout=2)
    s.close()
    return 'connected'
def fetch(url):
    return lambda: urllib.request.urlopen(url, timeout=5).read().decode()
def handler(event, context):
    return {{
        'raw': attempt(raw),
        'allowed': attempt(fetch('http://{allowed}/data')),
        'other': attempt(fetch('http://{other}/data')),
        'interfaces': ','.join(n for _, n in socket.if_nameindex()),
    }}
"#
    )
}

#[tokio::test]
async fn a_function_with_allowed_hosts_goes_out_only_through_the_proxy() {
    require!(Python);
    // The upstreams are on this machine's own (private) address, which only
    // an operator's flag opens; not on loopback, which inside a sandbox is
    // the sandbox's own and not proxied.
    let d = Daemon::start_with(&["--allow-private-egress", "true"]);
    let ip = crate::harness::own_address().to_string();
    assert_ne!(
        ip, "127.0.0.1",
        "this test needs an address besides loopback"
    );
    let allowed = crate::outbound::upstream_on(&ip).await;
    let other = crate::outbound::upstream_on(&ip).await;
    let port: u16 = d
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap();
    d.deploy(
        "egress",
        egress_probe(port, &allowed.to_string(), &other.to_string()).into_bytes(),
        &[
            ("runtime", "python"),
            ("file_name", "handler.py"),
            ("allow_host", &allowed.to_string()),
        ],
    )
    .await;
    let body = d.invoke_body("egress", String::new()).await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["raw"], "ECONNREFUSED",
        "a raw socket reached the daemon: {v}"
    );
    assert_eq!(v["interfaces"], "lo", "{v}");
    assert_eq!(v["allowed"], "from upstream", "{v}");
    assert_eq!(v["other"], "http 403", "{v}");
}
