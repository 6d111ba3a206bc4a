//! Packages as people declare them: unpinned names and ranges resolved at
//! deploy by the package manager's own resolver, dependencies the list
//! leaves out found, the lock kept with the version, and what the
//! resolution chose told in the deploy's answer.

use crate::harness::{Daemon, tar_of};
use crate::process::{write_wheel_of, write_wheel_requiring};
use hearth_test_support::require;

/// `(name, version, has a hash, was cached)` of a deploy's packages.
fn locked(v: &serde_json::Value) -> Vec<(String, String, bool, bool)> {
    v["packages"]
        .as_array()
        .unwrap_or_else(|| panic!("no packages in {v}"))
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["version"].as_str().unwrap().to_string(),
                p["hash"].as_str().is_some_and(|h| !h.is_empty()),
                p["cached"] == true,
            )
        })
        .collect()
}

fn owned(rows: &[(&str, &str, bool, bool)]) -> Vec<(String, String, bool, bool)> {
    rows.iter()
        .map(|(n, v, h, c)| (n.to_string(), v.to_string(), *h, *c))
        .collect()
}

#[tokio::test]
async fn python_requirements_resolve_at_deploy_into_a_lock_each_version_keeps() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    let w = wheels.path();
    write_wheel_of(w, "tinypkg", "1.1.0", "VERSION = '1.1.0'\n");
    write_wheel_of(w, "tinypkg", "1.2.0", "VERSION = '1.2.0'\n");
    // Like Jinja2 and MarkupSafe: the app needs a package its user never lists.
    write_wheel_requiring(
        w,
        "tinyapp",
        "2.0",
        "import tinypkg\nVERSION = '2.0'\n",
        &["tinypkg>=1.1"],
    );
    let d = Daemon::start_with(&["--offline-packages", w.to_str().unwrap()]);
    let code = "import tinyapp, tinypkg\ndef handler(e, c):\n    return {'app': tinyapp.VERSION, 'pkg': tinypkg.VERSION}\n";
    let bundle = tar_of(&[("handler.py", code), ("requirements.txt", "TinyApp\n")]);
    let q = [("runtime", "python"), ("file_name", "fn.tar")];
    let v1 = d.deploy("app", bundle.clone(), &q).await;
    assert_eq!(
        locked(&v1),
        owned(&[
            ("tinyapp", "2.0", true, false),
            ("tinypkg", "1.2.0", true, false)
        ]),
        "{v1}"
    );
    let warnings = v1["warnings"].to_string();
    assert!(
        warnings.contains("TinyApp resolved to 2.0") && warnings.contains("tinypkg==1.2.0"),
        "the deploy says what it chose and what it added: {warnings}"
    );
    assert!(
        v1["install_ms"].as_u64().is_some() && v1["compile_ms"].as_u64().is_some(),
        "{v1}"
    );
    let versions = |body: &str| -> (String, String) {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        (
            v["app"].as_str().unwrap().into(),
            v["pkg"].as_str().unwrap().into(),
        )
    };
    let (status, body) = d.call("app", "", "{}").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(versions(&body), ("2.0".into(), "1.2.0".into()));

    // A newer release appears. The deployed version keeps its lock; the
    // next deploy resolves anew, and what it already had comes from the
    // install cache.
    write_wheel_of(w, "tinypkg", "1.3.0", "VERSION = '1.3.0'\n");
    let v2 = d.deploy("app", bundle, &q).await;
    assert_eq!(
        locked(&v2),
        owned(&[
            ("tinyapp", "2.0", true, true),
            ("tinypkg", "1.3.0", true, false)
        ]),
        "{v2}"
    );
    assert_ne!(
        v1["artifact"], v2["artifact"],
        "the lock is part of the artifact"
    );
    let (_, newest) = d.call("app", "", "{}").await;
    let (_, first) = d.call("app@1", "", "{}").await;
    assert_eq!(versions(&first).1, "1.2.0", "{first}");
    assert_eq!(versions(&newest).1, "1.3.0", "{newest}");

    // `hearth versions` shows each version's lock.
    let f = d.get_json("/v1/functions/app").await;
    let per_version: Vec<Vec<String>> = f["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v["packages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    format!(
                        "{}=={}",
                        p["name"].as_str().unwrap(),
                        p["version"].as_str().unwrap()
                    )
                })
                .collect()
        })
        .collect();
    let mut per_version = per_version;
    per_version.sort();
    assert_eq!(
        per_version,
        [
            ["tinyapp==2.0", "tinypkg==1.2.0"],
            ["tinyapp==2.0", "tinypkg==1.3.0"]
        ],
        "{f}"
    );

    // A range nothing satisfies fails the deploy, naming the requirement.
    let none = tar_of(&[("handler.py", code), ("requirements.txt", "tinypkg>=9\n")]);
    let resp = d.deploy_raw("none", none, &q).await;
    let (status, _, msg) = crate::harness::error_of(resp).await;
    assert_eq!(status, 400);
    assert!(msg.contains("tinypkg>=9"), "{msg}");
}

/// A package registry speaking npm's protocol (a packument per name,
/// tarballs with sha512 integrity), whose packages a test can add to.
/// name → version → (packument entry, tarball)
type Published = std::collections::BTreeMap<
    String,
    std::collections::BTreeMap<String, (serde_json::Value, Vec<u8>)>,
>;

#[derive(Clone)]
struct Registry {
    url: String,
    packages: std::sync::Arc<std::sync::Mutex<Published>>,
}

impl Registry {
    async fn start() -> (Registry, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let registry = Registry {
            url: format!("http://{}", listener.local_addr().unwrap()),
            packages: Default::default(),
        };
        let (packument, tarball) = (registry.clone(), registry.clone());
        let app = axum::Router::new()
            .route(
                "/{name}",
                axum::routing::get(
                    move |axum::extract::Path(name): axum::extract::Path<String>| {
                        let r = packument.clone();
                        async move {
                            let packages = r.packages.lock().unwrap();
                            let Some(versions) = packages.get(&name) else {
                                return Err(axum::http::StatusCode::NOT_FOUND);
                            };
                            let latest = versions.keys().next_back().unwrap().clone();
                            let versions: serde_json::Map<String, serde_json::Value> = versions
                                .iter()
                                .map(|(v, (meta, _))| (v.clone(), meta.clone()))
                                .collect();
                            Ok(axum::Json(serde_json::json!({
                                "name": name, "dist-tags": {"latest": latest}, "versions": versions,
                            })))
                        }
                    },
                ),
            )
            .route(
                "/{name}/-/{file}",
                axum::routing::get(
                    move |axum::extract::Path((name, file)): axum::extract::Path<(
                        String,
                        String,
                    )>| {
                        let r = tarball.clone();
                        async move {
                            let version = file
                                .strip_prefix(&format!("{name}-"))
                                .and_then(|f| f.strip_suffix(".tgz"))
                                .unwrap_or_default()
                                .to_string();
                            let packages = r.packages.lock().unwrap();
                            packages
                                .get(&name)
                                .and_then(|v| v.get(&version))
                                .map(|(_, tgz)| tgz.clone())
                                .ok_or(axum::http::StatusCode::NOT_FOUND)
                        }
                    },
                ),
            );
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (registry, task)
    }

    /// Publishes `name@version` whose `index.js` is `main`, depending on
    /// `deps` (name → range).
    fn publish(&self, name: &str, version: &str, main: &str, deps: serde_json::Value) {
        use base64::Engine as _;
        use sha2::Digest;
        let manifest = serde_json::json!({
            "name": name, "version": version, "main": "index.js", "dependencies": deps,
        });
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, text) in [
            ("package/package.json", manifest.to_string()),
            ("package/index.js", main.to_string()),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(text.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, path, text.as_bytes()).unwrap();
        }
        let tgz = tar.into_inner().unwrap().finish().unwrap();
        let integrity = format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(&tgz))
        );
        let mut meta = manifest;
        meta["dist"] = serde_json::json!({
            "tarball": format!("{}/{name}/-/{name}-{version}.tgz", self.url),
            "integrity": integrity,
        });
        self.packages
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .insert(version.to_string(), (meta, tgz));
    }
}

/// A daemon whose npm installs go to `registry`.
fn daemon_for(registry: &Registry) -> Daemon {
    let host = registry.url.trim_start_matches("http://").to_string();
    Daemon::start_with(&[
        "--npm-registry",
        &registry.url,
        "--package-index-host",
        &host,
        "--allow-private-egress",
        "true",
    ])
}

#[tokio::test]
async fn js_ranges_resolve_and_install_at_deploy_for_both_js_runtimes() {
    let (registry, server) = Registry::start().await;
    registry.publish(
        "tinyjs",
        "1.4.0",
        "module.exports = () => 'tiny 1.4.0';\n",
        serde_json::json!({}),
    );
    let d = daemon_for(&registry);
    let code = "import tiny from 'tinyjs';\nexport default { fetch() { return new Response(tiny()); } };\n";
    let bundle = tar_of(&[
        ("index.mjs", code),
        ("package.json", r#"{"dependencies": {"tinyjs": "^1.0.0"}}"#),
    ]);
    for (name, runtime) in [("in-js", "js"), ("in-node", "node")] {
        let v = d
            .deploy(
                name,
                bundle.clone(),
                &[("runtime", runtime), ("file_name", "fn.tar")],
            )
            .await;
        let got = locked(&v);
        assert_eq!(got.len(), 1, "{v}");
        assert_eq!(
            (got[0].0.as_str(), got[0].1.as_str(), got[0].2),
            ("tinyjs", "1.4.0", true),
            "{v}"
        );
        assert!(
            v["warnings"]
                .to_string()
                .contains("tinyjs@^1.0.0 resolved to 1.4.0"),
            "{v}"
        );
        let (status, body) = d.call(name, "", "").await;
        assert_eq!((status, body.as_str()), (200, "tiny 1.4.0"), "{name}");
    }
    // A range the registry cannot satisfy fails the deploy in both.
    let bad = tar_of(&[
        ("index.mjs", code),
        ("package.json", r#"{"dependencies": {"tinyjs": "^2.0.0"}}"#),
    ]);
    for runtime in ["js", "node"] {
        let resp = d
            .deploy_raw(
                "bad",
                bad.clone(),
                &[("runtime", runtime), ("file_name", "fn.tar")],
            )
            .await;
        let (status, _, msg) = crate::harness::error_of(resp).await;
        assert_eq!(status, 400, "{runtime}: {msg}");
        assert!(msg.contains("tinyjs@^2.0.0"), "{runtime}: {msg}");
    }
    server.abort();
}

/// npm locks the whole tree: a dependency's own dependencies are installed
/// as they were resolved at deploy, on any node, even after a newer
/// release that their ranges would now pick.
#[tokio::test]
async fn an_npm_lock_holds_the_dependencies_of_dependencies() {
    require!(Node);
    let (registry, server) = Registry::start().await;
    registry.publish(
        "tinydep",
        "1.0.0",
        "module.exports = '1.0.0';\n",
        serde_json::json!({}),
    );
    registry.publish(
        "tinyjs",
        "1.4.0",
        "module.exports = () => 'tinydep ' + require('tinydep');\n",
        serde_json::json!({"tinydep": "^1.0.0"}),
    );
    let code = "import tiny from 'tinyjs';\nexport default { fetch() { return new Response(tiny()); } };\n";
    let files = [
        ("index.mjs", code),
        ("package.json", r#"{"dependencies": {"tinyjs": "^1.0.0"}}"#),
    ];
    let q = [("runtime", "node"), ("file_name", "fn.tar")];
    let first = daemon_for(&registry);
    first.deploy("f", tar_of(&files), &q).await;
    assert_eq!(first.call("f", "", "").await, (200, "tinydep 1.0.0".into()));
    let versions = first.get_json("/v1/functions/f").await;
    let lock =
        serde_json::json!({"hearth_lock": 1, "packages": versions["versions"][0]["packages"]});
    assert!(lock.to_string().contains("node_modules/tinydep"), "{lock}");

    // A newer release of the dependency's dependency appears; another node
    // (a fresh daemon) installs the version from its lock.
    registry.publish(
        "tinydep",
        "1.1.0",
        "module.exports = '1.1.0';\n",
        serde_json::json!({}),
    );
    let other = daemon_for(&registry);
    let mut locked_files = files.to_vec();
    let lock_text = lock.to_string();
    locked_files.push(("hearth.lock", &lock_text));
    other.deploy("f", tar_of(&locked_files), &q).await;
    assert_eq!(
        other.call("f", "", "").await,
        (200, "tinydep 1.0.0".into()),
        "the locked tree"
    );
    // Resolved anew, the same requirement gets the new release.
    other.deploy("g", tar_of(&files), &q).await;
    assert_eq!(other.call("g", "", "").await, (200, "tinydep 1.1.0".into()));
    server.abort();
}
