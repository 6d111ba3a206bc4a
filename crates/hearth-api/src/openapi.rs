//! `GET /v1/openapi.json`: the management and invocation API, described.
//! The deploy settings come from the table the parser reads
//! (`deploy_settings.rs`); the rest is written here beside the routes in
//! `lib.rs`, and a unit test below fails when a route there (or one of its
//! methods) is not described here.

use axum::Json;
use serde_json::{Value, json};

fn error_ref() -> Value {
    json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

pub(crate) async fn document() -> Json<Value> {
    let err = error_ref();
    let name =
        json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}});
    Json(json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Hearth",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Self-hostable serverless platform. Management calls need `Authorization: Bearer <token>`."
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
                    "kind": {"type": "string"}, "message": {"type": "string"}}}}},
                "Limits": {"type": "object", "properties": {
                    "memory_mib": {"type": "integer"}, "timeout_ms": {"type": "integer"}}},
                "FunctionSpec": {"type": "object", "properties": {
                    "runtime": {"type": "string", "enum": ["wasm", "js", "python", "node"]},
                    "limits": {"$ref": "#/components/schemas/Limits"},
                    "allowed_hosts": {"type": "array", "items": {"type": "string"}},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "public": {"type": "boolean"}}},
                "FunctionVersion": {"type": "object", "properties": {
                    "tenant": {"type": "string"}, "name": {"type": "string"},
                    "version": {"type": "integer"}, "artifact": {"type": "string", "description": "sha256 of the code"},
                    "spec": {"$ref": "#/components/schemas/FunctionSpec"},
                    "created_at_ms": {"type": "integer"}}},
                "LogRecord": {"type": "object", "properties": {
                    "invocation_id": {"type": "string"}, "version": {"type": "integer"}, "ts_ms": {"type": "integer"},
                    "stream": {"type": "string", "enum": ["stderr", "log", "system"]},
                    "level": {"type": "string"}, "message": {"type": "string"}}}
            }
        },
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {"get": {"summary": "Liveness", "security": [], "responses": {"200": {"description": "ok"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics (admin only); series naming tenants and functions only with `--metrics-per-function`", "responses": {"200": {"description": "text exposition"}, "401": err, "403": err}}},
            "/v1/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3"}}}},
            "/v1/status": {"get": {"summary": "The node: in-flight invocations, each tier's sandboxes, pools and zygotes, and what this machine cannot enforce (`degraded`); for an admin token also `loaded` ([[tenant, name]] with code prepared) and `pool_free`", "responses": {"200": {"description": "status"}, "401": err}}},
            "/v1/whoami": {"get": {"summary": "The tenant and role of the token", "responses": {"200": {"description": "principal"}, "401": err}}},
            "/v1/tenants": {"post": {
                "summary": "Create a tenant and a member token for it (admin only)",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}},
                "responses": {"201": {"description": "{tenant, token}"}, "401": err, "403": err, "409": err}}},
            "/v1/tenants/{tenant}": {
                "parameters": [{"name": "tenant", "in": "path", "required": true, "schema": {"type": "string"}}],
                "get": {"summary": "A tenant's settings (its own token or an admin's)",
                    "responses": {"200": {"description": "{tenant, colocation, colocation_override, cluster_colocation}"}, "403": err, "404": err}},
                "put": {"summary": "Set or clear (null) the tenant's colocation mode; admin only; applies to its next cold starts",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {
                        "type": "object", "properties": {"colocation": {"type": "string", "nullable": true, "enum": ["full", "tenant", "function", "none"]}}}}}},
                    "responses": {"200": {"description": "the tenant's settings"}, "403": err, "404": err, "422": err}}
            },
            "/v1/functions": {"get": {"summary": "List the tenant's functions",
                "responses": {"200": {"description": "{tenant, functions: [{name, latest, versions}]}"}, "401": err}}},
            "/v1/functions/{name}": {
                "parameters": [name],
                "post": {
                    "summary": "Deploy a new version. The body is the code (Wasm binary or WAT text).",
                    "parameters": crate::deploy_settings::openapi_params(),
                    "requestBody": {"required": true, "content": {"application/wasm": {}, "application/octet-stream": {}}},
                    "responses": {"201": {"description": "the new version, with compile_ms, install_ms, packages (its lock, each with cached), warnings and url"}, "400": err, "401": err, "413": err}
                },
                "get": {"summary": "A function's versions", "responses": {"200": {"description": "{tenant, name, versions}; each version with its packages (lock)"}, "404": err}},
                "delete": {"summary": "Remove a function, its versions, KV and logs", "responses": {"204": {"description": "removed"}, "404": err}}
            },
            "/v1/functions/{name}/logs": {"get": {
                "summary": "A function's log lines, oldest first",
                "parameters": [name,
                    {"name": "invocation", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "default": 100, "maximum": 1000}},
                    {"name": "after", "in": "query", "description": "only lines after the one with this id, oldest first (following)", "schema": {"type": "integer"}}],
                "responses": {"200": {"description": "{tenant, name, lines: [LogRecord with id]}; lines of invocations that finished on this node are all there"}, "404": err}}},
            "/v1/functions/{name}/kv": {"get": {
                "summary": "A function's KV keys (UTF-8 ones; not_utf8 counts the others)",
                "parameters": [name,
                    {"name": "prefix", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "default": 1000}}],
                "responses": {"200": {"description": "{tenant, name, keys, not_utf8}"}, "404": err}}},
            "/v1/functions/{name}/kv/{key}": {
                "get": {"summary": "A KV value, raw", "parameters": [name, {"name": "key", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "the value's bytes"}, "400": err, "404": err}},
                "put": {"summary": "Set a KV value (the body)", "parameters": [name, {"name": "key", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "requestBody": {"required": true, "content": {"application/octet-stream": {}}},
                    "responses": {"204": {"description": "set"}, "400": err, "404": err, "413": err, "507": err}},
                "delete": {"summary": "Remove a KV key", "parameters": [name, {"name": "key", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"204": {"description": "removed"}, "404": err}}},
            "/v1/functions/{name}/recordings": {"get": {
                "summary": "The function's tapes, newest first (docs/recording.md)",
                "parameters": [name,
                    {"name": "status", "in": "query", "description": "`error`, `any` or an HTTP status", "schema": {"type": "string"}},
                    {"name": "since", "in": "query", "description": "90s, 15m, 1h, 2d", "schema": {"type": "string"}},
                    {"name": "version", "in": "query", "schema": {"type": "integer"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "default": 100}}],
                "responses": {"200": {"description": "{tenant, name, recordings: [{id, version, tier, started_ms, duration_us, status, outcome}]}"}, "400": err, "503": err}}},
            "/v1/functions/{name}/replay": {"post": {
                "summary": "Replay recorded traffic against a version; which responses changed",
                "parameters": [name,
                    {"name": "against", "in": "query", "required": true, "schema": {"type": "integer"}},
                    {"name": "last", "in": "query", "schema": {"type": "integer", "default": 100}},
                    {"name": "since", "in": "query", "schema": {"type": "string"}},
                    {"name": "status", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "{name, against, replayed, changed, diverged, results: [ReplayReport]}"}, "400": err, "404": err}}},
            "/v1/recordings/{id}": {"get": {
                "summary": "One tape's timeline: request, a page of host calls with answers, outcome; bodies shown up to 64 KiB",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "offset", "in": "query", "schema": {"type": "integer", "default": 0}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "default": 200, "maximum": 1000}}],
                "responses": {"200": {"description": "{id, ..., request, calls: [{n, call, answer, payload_bytes}], calls_total, next_offset, outcome}"}, "404": err}}},
            "/v1/recordings/{id}/payload": {"get": {
                "summary": "One payload's bytes, whole: of=request, response, or a call's number",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "of", "in": "query", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "application/octet-stream"}, "400": err, "404": err}}},
            "/v1/recordings/{id}/export": {"get": {
                "summary": "One tape as a self-checking file (JSON with a sha256)",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "the tape file"}, "404": err}}},
            "/v1/recordings/{id}/replay": {"post": {
                "summary": "Replay one tape: identical, or where it diverged and how the response differs",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "version", "in": "query", "description": "default: the version that made the tape", "schema": {"type": "integer"}}],
                "responses": {"200": {"description": "{identical, verdict, divergence, recorded, replayed, diff, logs}"}, "404": err}}},
            "/v1/replay": {"post": {
                "summary": "Replay an exported tape file (the body) against the caller's function of its name",
                "parameters": [{"name": "version", "in": "query", "schema": {"type": "integer"}}],
                "responses": {"200": {"description": "a replay report"}, "400": err, "404": err}}},
            "/v1/cluster/nodes": {
                "get": {"summary": "A gateway's nodes: alive or why not, capacity, memory committed, functions loaded (admin)",
                    "responses": {"200": {"description": "{nodes: [MemberView]}"}, "401": err, "403": err, "404": err}},
                "post": {"summary": "A node joins the gateway: {url, capacity_mib} → {id, heartbeat_ms} (admin)",
                    "responses": {"201": {"description": "joined"}, "400": err, "401": err, "403": err, "404": err}}},
            "/v1/cluster/nodes/{id}": {"delete": {
                "summary": "A node leaves the gateway cleanly (admin)",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"204": {"description": "left"}, "404": err}}},
            "/v1/cluster/nodes/{id}/heartbeat": {"post": {
                "summary": "A node's heartbeat: {loaded: [[tenant, name]], in_flight, rss_mib}; 404 means join again (admin)",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"204": {"description": "recorded"}, "404": err}}},
            "/v1/artifacts/{hash}": {"get": {
                "summary": "Deployed code by sha256, for a gateway's nodes (admin)",
                "parameters": [{"name": "hash", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "the artifact's bytes"}, "400": err, "404": err}}},
            "/fn/{tenant}/{name}": {
                "parameters": [
                    {"name": "tenant", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "name", "in": "path", "required": true, "description": "`name` or `name@version`", "schema": {"type": "string"}},
                    {"name": "Hearth-Version", "in": "header", "schema": {"type": "integer"}}
                ],
                "post": {
                    "summary": "Invoke a function (any method; any sub-path after the name is passed on)",
                    "security": [{"bearer": []}, {}],
                    "responses": {
                        "200": {"description": "the function's response; headers Hearth-Invocation-Id, Hearth-Version, Hearth-Start (and through a gateway Hearth-Node, Hearth-Retried-From)"},
                        "401": err, "403": err, "404": err, "413": err, "429": err,
                        "500": err, "502": err, "503": err, "504": err
                    }
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    /// Every `.route(path, methods)` in `router_for`, as (OpenAPI path,
    /// method): `{*rest}` is a `{rest}` parameter, and an invocation's
    /// sub-paths are described under the function's own path.
    fn routes_in_lib_rs() -> Vec<(String, String)> {
        let src = include_str!("lib.rs");
        let body = &src[src
            .find("pub fn router_for")
            .expect("router_for is in lib.rs")..];
        let mut out = Vec::new();
        for chunk in body.split(".route(").skip(1) {
            let path_start = chunk.find('"').expect("a path literal") + 1;
            let path_len = chunk[path_start..].find('"').expect("its end");
            let path = &chunk[path_start..path_start + path_len];
            // The methods: up to the `)` that closes `.route(`.
            let rest = &chunk[path_start + path_len + 1..];
            let mut depth = 1;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(rest.len(), |(i, _)| i);
            let methods = &rest[..end];
            let path = if path.starts_with("/fn/{tenant}/{name}") {
                "/fn/{tenant}/{name}".to_string()
            } else {
                path.replace("{*", "{")
            };
            for m in ["get", "post", "put", "delete", "any"] {
                let called = methods.match_indices(&format!("{m}(")).any(|(i, _)| {
                    i == 0
                        || !methods.as_bytes()[i - 1].is_ascii_alphanumeric()
                            && methods.as_bytes()[i - 1] != b'_'
                });
                if called {
                    // Any method: described as the POST most callers use.
                    let m = if m == "any" { "post" } else { m };
                    out.push((path.clone(), m.to_string()));
                }
            }
        }
        out
    }

    #[tokio::test]
    async fn every_route_and_method_of_the_router_is_described() {
        let axum::Json(doc) = super::document().await;
        let routes = routes_in_lib_rs();
        assert!(routes.len() > 25, "the scan found the router: {routes:?}");
        for (path, method) in routes {
            assert!(
                doc["paths"][&path].get(&method).is_some(),
                "{} {path} is served but not in /v1/openapi.json",
                method.to_uppercase()
            );
        }
    }

    #[tokio::test]
    async fn the_deploy_settings_are_the_ones_the_parser_takes() {
        let axum::Json(doc) = super::document().await;
        let params = doc["paths"]["/v1/functions/{name}"]["post"]["parameters"]
            .as_array()
            .unwrap();
        let documented: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
        let table: Vec<&str> = crate::deploy_settings::SETTINGS
            .iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(documented, table);
        for s in ["record_sample", "keep_ok", "keep_errors", "max_tape_bytes"] {
            assert!(documented.contains(&s), "{s}");
        }
        // Each example is a value of its schema's type.
        for p in params {
            let e = &p["example"];
            let fits = match p["schema"]["type"].as_str().unwrap() {
                "integer" => e.is_u64(),
                "number" => e.is_number(),
                "boolean" => e.is_boolean(),
                _ => e.is_string(),
            };
            assert!(fits, "{p}");
        }
    }
}
