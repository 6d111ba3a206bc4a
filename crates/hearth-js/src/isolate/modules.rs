//! Module resolution and loading inside an isolate, like Node: relative
//! paths with extensions and `index` files, bare names in the bundle's
//! `node_modules`. Built-ins and packages the bundle lacks are
//! `Unsupported` (the process tier has them).

use std::rc::Rc;

use rquickjs::loader::{Loader, Resolver};
use rquickjs::{Ctx, Module};

use super::State;
use crate::compile::Kind;

/// Node.js built-in module names: importing one is `Unsupported` here.
fn is_builtin(name: &str) -> bool {
    const BUILTINS: &[&str] = &[
        "assert",
        "async_hooks",
        "buffer",
        "child_process",
        "cluster",
        "console",
        "constants",
        "crypto",
        "dgram",
        "diagnostics_channel",
        "dns",
        "domain",
        "events",
        "fs",
        "http",
        "http2",
        "https",
        "inspector",
        "module",
        "net",
        "os",
        "path",
        "perf_hooks",
        "process",
        "punycode",
        "querystring",
        "readline",
        "repl",
        "stream",
        "string_decoder",
        "sys",
        "timers",
        "tls",
        "trace_events",
        "tty",
        "url",
        "util",
        "v8",
        "vm",
        "wasi",
        "worker_threads",
        "zlib",
    ];
    name.starts_with("node:") || BUILTINS.contains(&name.split('/').next().unwrap_or(name))
}

fn normalize(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    out.join("/")
}

/// Why an import or require found nothing in the bundle.
#[derive(Debug, thiserror::Error)]
pub(super) enum ResolveError {
    /// A Node.js built-in or a package the bundle does not carry: the
    /// process tier has it, so the invocation is `Unsupported` here.
    #[error("{0} is not available in the js tier")]
    Unavailable(String),
    /// A relative path that names no file of the bundle: the function's
    /// own mistake, in any tier.
    #[error("cannot find module '{name}' from '{from}'")]
    NotFound { name: String, from: String },
}

/// Resolves `name` imported or required from bundle file `from`, like
/// Node: relative paths with extensions and index files tried, bare names
/// in the bundle's `node_modules`. Built-ins and packages the bundle does
/// not carry are `Unsupported` (the process tier has them).
pub(super) fn resolve(state: &State, from: &str, name: &str) -> Result<String, ResolveError> {
    let units = &state.code().units;
    if is_builtin(name) {
        let what = format!("the Node.js module \"{name}\"");
        state.flag_unsupported(&what);
        return Err(ResolveError::Unavailable(what));
    }
    let candidates = |base: &str| -> Vec<String> {
        let mut c = vec![base.to_string()];
        for ext in [".js", ".mjs", ".cjs", ".json"] {
            c.push(format!("{base}{ext}"));
        }
        for index in ["index.js", "index.mjs", "index.cjs"] {
            c.push(normalize(&format!("{base}/{index}")));
        }
        c
    };
    let find = |base: &str| candidates(base).into_iter().find(|c| units.contains_key(c));
    if name.starts_with("./") || name.starts_with("../") || name.starts_with('/') {
        let dir = from.rsplit_once('/').map_or("", |(d, _)| d);
        let joined = if name.starts_with('/') {
            normalize(name)
        } else {
            normalize(&format!("{dir}/{name}"))
        };
        return find(&joined).ok_or_else(|| ResolveError::NotFound {
            name: name.to_string(),
            from: from.to_string(),
        });
    }
    // A bare name: node_modules in the bundle.
    let (pkg, sub) = match name.strip_prefix('@') {
        Some(rest) => {
            let mut parts = rest.splitn(3, '/');
            let scope = parts.next().unwrap_or_default();
            let n = parts.next().unwrap_or_default();
            (format!("@{scope}/{n}"), parts.next().map(str::to_string))
        }
        None => {
            let mut parts = name.splitn(2, '/');
            (
                parts.next().unwrap_or_default().to_string(),
                parts.next().map(str::to_string),
            )
        }
    };
    let root = format!("node_modules/{pkg}");
    let found = match sub {
        Some(sub) => find(&format!("{root}/{sub}")),
        None => {
            let main = units
                .get(&format!("{root}/package.json"))
                .and_then(|u| serde_json::from_slice::<serde_json::Value>(&u.bytes).ok())
                .and_then(|p| {
                    p.get("main")
                        .or_else(|| p.get("module"))
                        .and_then(|m| m.as_str())
                        .map(|m| normalize(&format!("{root}/{m}")))
                });
            main.and_then(|m| find(&m)).or_else(|| find(&root))
        }
    };
    found.ok_or_else(|| {
        let what = format!("the package \"{pkg}\" (not in the bundle)");
        state.flag_unsupported(&what);
        ResolveError::Unavailable(what)
    })
}

pub(super) struct BundleResolver(pub(super) Rc<State>);

impl Resolver for BundleResolver {
    fn resolve<'js>(
        &mut self,
        _ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _attributes: Option<rquickjs::loader::ImportAttributes<'js>>,
    ) -> rquickjs::Result<String> {
        resolve(&self.0, base, name)
            .map_err(|e| rquickjs::Error::new_resolving_message(base, name, e.to_string()))
    }
}

pub(super) struct BundleLoader(pub(super) Rc<State>);

impl Loader for BundleLoader {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<rquickjs::loader::ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, rquickjs::module::Declared>> {
        let Some(unit) = self.0.code().units.get(name) else {
            return Err(rquickjs::Error::new_loading(name));
        };
        match unit.kind {
            // SAFETY: bytecode from `compile`, checksummed on disk.
            Kind::Esm => unsafe { Module::load(ctx.clone(), &unit.bytes) },
            Kind::Cjs => Module::declare(
                ctx.clone(),
                name,
                format!(
                    "export default globalThis.__hearth_require({});",
                    serde_json::to_string(name).unwrap_or_default()
                ),
            ),
            Kind::Json => Module::declare(
                ctx.clone(),
                name,
                format!("export default {};", String::from_utf8_lossy(&unit.bytes)),
            ),
        }
    }
}
