//! Secrets: set, bound to functions of every tier as environment
//! variables, rotated without a deploy, listed by name only.

use hearth_test_support::require;

use crate::cli::hearth;
use crate::harness::Daemon;

/// A function of each tier that answers its `API_KEY` variable.
pub(crate) const TIERS: &[(&str, &str, &str, &str)] = &[
    (
        "js",
        "index.mjs",
        "js",
        "export default { fetch(req, env) { return new Response(env.API_KEY ?? ''); } };",
    ),
    (
        "node",
        "index.js",
        "node",
        "module.exports.handler = async () => ({ statusCode: 200, body: process.env.API_KEY || '' });\n",
    ),
    (
        "py",
        "handler.py",
        "python",
        "import os\ndef handler(event, context):\n    return {'statusCode': 200, 'body': os.environ.get('API_KEY', '')}\n",
    ),
];

/// What each of `names` answers.
async fn answers(d: &Daemon, names: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for name in names {
        out.push(d.invoke_body(name, String::new()).await);
    }
    out
}

#[tokio::test]
async fn a_secret_reaches_every_tier_as_env_and_rotates_without_a_deploy() {
    require!(Python);
    require!(Clang);
    let d = Daemon::start();
    let (ok, out, err) = hearth(&d, &["secret", "set", "API_KEY", "hunter2-one"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "set secret API_KEY");
    for (name, file, runtime, code) in TIERS {
        d.deploy(
            name,
            code.as_bytes().to_vec(),
            &[
                ("runtime", runtime),
                ("file_name", file),
                ("secret", "API_KEY"),
            ],
        )
        .await;
    }
    // wasm: the WASI environment, under another variable's name.
    let tmp = tempfile::tempdir().unwrap();
    let probe = crate::examples_c::build_with("wasi_probe", tmp.path(), &[]);
    d.deploy("wasm", probe, &[("secret", "GREETING=API_KEY")])
        .await;
    let names = ["js", "node", "py", "wasm"];
    let seen = answers(&d, &names).await;
    assert_eq!(&seen[..3], ["hunter2-one"; 3]);
    assert!(seen[3].contains("GREETING=hunter2-one"), "{}", seen[3]);

    // Rotation: the next invocation of each reads the new value, with no
    // new version.
    let (ok, out, err) = hearth(&d, &["secret", "set", "API_KEY", "hunter2-two"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("rotated secret API_KEY"), "{out}");
    let seen = answers(&d, &names).await;
    assert_eq!(&seen[..3], ["hunter2-two"; 3]);
    assert!(seen[3].contains("GREETING=hunter2-two"), "{}", seen[3]);
    let versions = d.get_json("/v1/functions/js").await;
    assert_eq!(versions["versions"].as_array().unwrap().len(), 1);

    // Listed by name, with who binds it; no value anywhere.
    let (ok, out, err) = hearth(&d, &["secret", "ls"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("API_KEY") && out.contains("js@1") && out.contains("wasm@1"),
        "{out}"
    );
    for path in [
        "/v1/secrets",
        "/v1/functions",
        "/v1/functions/js",
        "/v1/functions/wasm",
    ] {
        let text = d.get_text(path).await;
        assert!(!text.contains("hunter2"), "{path}: {text}");
    }
    assert!(d.get_text("/v1/functions/js").await.contains("\"API_KEY\""));
    // The versions listing says which variable reads which secret.
    let (ok, out, err) = hearth(&d, &["versions", "wasm"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("secret:GREETING=API_KEY") && !out.contains("hunter2"),
        "{out}"
    );

    // Removing a secret a live version binds is refused; unbound, it goes.
    let (ok, _, err) = hearth(&d, &["secret", "rm", "API_KEY"]);
    assert!(!ok && err.contains("409") && err.contains("js@1"), "{err}");
    for name in names {
        let r = d
            .delete(&format!("/v1/functions/{name}"))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    let (ok, out, err) = hearth(&d, &["secret", "rm", "API_KEY"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "removed secret API_KEY");
}
