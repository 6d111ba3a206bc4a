//! Colocation (Hydra's `full`, `tenant`, `function`, `none`) on one node:
//! who may fork from a Python package zygote, and that sharing one never
//! means sharing a sandbox or its scratch space.

use crate::harness::{Daemon, tar_of};
use crate::process::write_wheel;
use hearth_test_support::require;

#[tokio::test]
async fn with_full_colocation_tenants_share_package_zygotes_but_never_a_sandbox_or_its_scratch() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    write_wheel(wheels.path());
    let d = Daemon::start_with(&[
        "--offline-packages",
        wheels.path().to_str().unwrap(),
        "--colocation",
        "full",
    ]);
    let acme = d.create_tenant("acme").await;
    let code = r#"
import os, tinypkg
def handler(e, c):
    seen = sorted(f for f in os.listdir('/tmp') if f.startswith('mark'))
    open('/tmp/mark-' + os.environ['WHO'], 'w').write('x')
    return {'seen': seen, 'host': os.uname().nodename, 'imported_at': tinypkg.IMPORTED_AT,
            'code': sorted(os.listdir('/code'))}
"#;
    let bundle = tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "tinypkg==1.2.0\n"),
        ("admin-only.txt", "secret"),
    ]);
    d.deploy(
        "same",
        bundle,
        &[
            ("runtime", "python"),
            ("file_name", "fn.tar"),
            ("env", "WHO=admin"),
        ],
    )
    .await;
    let acme_bundle = tar_of(&[
        ("handler.py", code),
        ("requirements.txt", "tinypkg==1.2.0\n"),
    ]);
    let r = d
        .http
        .post(format!("{}/v1/functions/same", d.url))
        .query(&[
            ("runtime", "python"),
            ("file_name", "fn.tar"),
            ("env", "WHO=acme"),
        ])
        .bearer_auth(&acme)
        .body(acme_bundle)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    let as_json = |b: &str| serde_json::from_str::<serde_json::Value>(b).unwrap();
    let (_, first) = d.call("same", "", "").await;
    let (_, again) = d.call("same", "", "").await;
    let (first, again) = (as_json(&first), as_json(&again));
    assert_eq!(first["seen"], serde_json::json!([]));
    assert_eq!(
        again["seen"],
        serde_json::json!(["mark-admin"]),
        "one handler keeps its scratch between invocations, so the check below can fail"
    );
    let r = d
        .http
        .post(format!("{}/fn/acme/same", d.url))
        .bearer_auth(&acme)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let theirs = as_json(&r.text().await.unwrap());
    assert_eq!(
        theirs["seen"],
        serde_json::json!([]),
        "acme's sandbox must not see admin's scratch: {theirs}"
    );
    assert_ne!(theirs["host"], first["host"], "a sandbox of its own");
    assert_eq!(
        theirs["code"],
        // Its bundle, with the lock its deploy resolved.
        serde_json::json!(["handler.py", "hearth.lock", "requirements.txt"]),
        "acme sees only its own code"
    );
    assert_eq!(
        theirs["imported_at"], first["imported_at"],
        "the zygote holds packages only, so under `full` tenants share it"
    );
}

/// Which zygote a handler forked from shows in the package's import time:
/// handlers forked from one zygote report the same `IMPORTED_AT`.
#[tokio::test]
async fn colocation_decides_who_forks_from_one_package_zygote_and_tenants_can_override_it() {
    require!(Python);
    let wheels = tempfile::tempdir().unwrap();
    write_wheel(wheels.path());
    let d = Daemon::start_with(&["--offline-packages", wheels.path().to_str().unwrap()]);
    let acme = d.create_tenant("acme").await;
    let bundle = tar_of(&[
        (
            "handler.py",
            "import tinypkg\ndef handler(e, c):\n    return {'imported_at': tinypkg.IMPORTED_AT}\n",
        ),
        ("requirements.txt", "tinypkg==1.2.0\n"),
    ]);
    let q = [("runtime", "python"), ("file_name", "fn.tar")];
    // (tenant, function) → the import time its handler inherited.
    let imported_at = |tenant: &'static str, name: &'static str| {
        let token = if tenant == "acme" { &acme } else { &d.token };
        let (d, bundle, token) = (&d, bundle.clone(), token.clone());
        async move {
            let r = d
                .http
                .post(format!("{}/v1/functions/{name}", d.url))
                .query(&q)
                .bearer_auth(&token)
                .body(bundle)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
            let r = d
                .http
                .post(format!("{}/fn/{tenant}/{name}", d.url))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            let body = r.text().await.unwrap();
            let v: serde_json::Value = serde_json::from_str(&body).expect(&body);
            v["imported_at"].as_f64().expect(&body)
        }
    };
    let put = |tenant: &str, mode: serde_json::Value| {
        d.http
            .put(format!("{}/v1/tenants/{tenant}", d.url))
            .bearer_auth(&d.token)
            .json(&serde_json::json!({ "colocation": mode }))
            .send()
    };

    // The default, `tenant`: one zygote per tenant and package set.
    let (a1, a2, x1) = (
        imported_at("admin", "a1").await,
        imported_at("admin", "a2").await,
        imported_at("acme", "x1").await,
    );
    assert_eq!(a1, a2, "one tenant's functions share its zygote");
    assert_ne!(a1, x1, "another tenant gets a zygote of its own");
    let status = d.get_json("/v1/status").await;
    assert_eq!(status["colocation"], "tenant");
    let scopes: Vec<serde_json::Value> = status["tiers"]["process"]["details"]["zygotes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["scope"].clone())
        .collect();
    for tenant in ["admin", "acme"] {
        assert!(
            scopes.contains(&serde_json::json!({"shared_by": "tenant", "of": tenant})),
            "{scopes:?}"
        );
    }

    // Only an admin sets a mode; a tenant may read its own settings.
    let r = d
        .http
        .put(format!("{}/v1/tenants/acme", d.url))
        .bearer_auth(&acme)
        .json(&serde_json::json!({"colocation": "full"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = d
        .http
        .get(format!("{}/v1/tenants/admin", d.url))
        .bearer_auth(&acme)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "not another tenant's");
    assert_eq!(put("ghost", "full".into()).await.unwrap().status(), 404);
    let r = put("acme", "some".into()).await.unwrap();
    assert_eq!(r.status(), 422, "an unknown mode is refused");

    // `function`: each function its own zygote.
    let r = put("acme", "function".into()).await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (
            &v["colocation"],
            &v["colocation_override"],
            &v["cluster_colocation"]
        ),
        (&"function".into(), &"function".into(), &"tenant".into())
    );
    let (f1, f2) = (
        imported_at("acme", "f1").await,
        imported_at("acme", "f2").await,
    );
    assert_ne!(f1, f2, "function mode: no zygote shared between functions");
    assert_ne!(f1, x1, "nor with the tenant's zygote");

    // `none`: every handler forks from the bare root and imports itself.
    put("acme", "none".into()).await.unwrap();
    let (n1, n2) = (
        imported_at("acme", "n1").await,
        imported_at("acme", "n2").await,
    );
    assert_ne!(n1, n2);
    assert!(n1 != x1 && n1 != f1 && n2 != f2);

    // `full` for both tenants: one zygote serves both, and it is not
    // either tenant's own.
    put("acme", "full".into()).await.unwrap();
    put("admin", "full".into()).await.unwrap();
    let (s1, s2) = (
        imported_at("admin", "s1").await,
        imported_at("acme", "s2").await,
    );
    assert_eq!(s1, s2, "full: tenants share one zygote");
    assert!(s1 != a1 && s1 != x1);

    // Cleared: the cluster's mode again, and a tenant sees its own settings.
    put("acme", serde_json::Value::Null).await.unwrap();
    let r = d
        .http
        .get(format!("{}/v1/tenants/acme", d.url))
        .bearer_auth(&acme)
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (&v["colocation"], &v["colocation_override"]),
        (&"tenant".into(), &serde_json::Value::Null)
    );
    assert_eq!(
        imported_at("acme", "x2").await,
        x1,
        "back to the tenant's own zygote"
    );
}
