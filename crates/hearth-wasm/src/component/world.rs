//! Which components Hearth runs: those of the `wasi:http/proxy` world
//! (0.2.x), importing only what [`linker`] provides. Checked at deploy so
//! that a component Hearth cannot run is refused there, with the reason.

use hearth_host::DeployError;
use wasmtime::component::{Component, Linker};
use wasmtime_wasi_http::p2::bindings::ProxyPre;

use super::host::ComponentState;

/// The export a component must have: `wasi:http/incoming-handler`.
const HANDLER: &str = "wasi:http/incoming-handler";

/// Interfaces Hearth provides, with the version track the linker accepts
/// (any 0.2 patch up to the pinned wasmtime's; `wasi:config` only at the
/// release candidate wasmtime implements).
const PROVIDED: &[(&str, &str)] = &[
    ("wasi:http/types", "0.2"),
    ("wasi:http/outgoing-handler", "0.2"),
    ("wasi:io/error", "0.2"),
    ("wasi:io/poll", "0.2"),
    ("wasi:io/streams", "0.2"),
    ("wasi:clocks/monotonic-clock", "0.2"),
    ("wasi:clocks/wall-clock", "0.2"),
    ("wasi:random/random", "0.2"),
    ("wasi:random/insecure", "0.2"),
    ("wasi:random/insecure-seed", "0.2"),
    ("wasi:cli/environment", "0.2"),
    ("wasi:cli/exit", "0.2"),
    ("wasi:cli/stdin", "0.2"),
    ("wasi:cli/stdout", "0.2"),
    ("wasi:cli/stderr", "0.2"),
    ("wasi:cli/terminal-input", "0.2"),
    ("wasi:cli/terminal-output", "0.2"),
    ("wasi:cli/terminal-stdin", "0.2"),
    ("wasi:cli/terminal-stdout", "0.2"),
    ("wasi:cli/terminal-stderr", "0.2"),
    // Guest toolchains link these by default; Hearth gives a function no
    // preopened directories and no socket may connect anywhere.
    ("wasi:filesystem/types", "0.2"),
    ("wasi:filesystem/preopens", "0.2"),
    ("wasi:sockets/network", "0.2"),
    ("wasi:sockets/instance-network", "0.2"),
    ("wasi:sockets/tcp", "0.2"),
    ("wasi:sockets/tcp-create-socket", "0.2"),
    ("wasi:sockets/udp", "0.2"),
    ("wasi:sockets/udp-create-socket", "0.2"),
    ("wasi:sockets/ip-name-lookup", "0.2"),
    ("wasi:config/store", "0.2.0-rc.1"),
    ("wasi:keyvalue/store", "0.2.0-draft"),
    ("wasi:keyvalue/atomics", "0.2.0-draft"),
    ("wasi:keyvalue/batch", "0.2.0-draft"),
    ("wasi:logging/logging", "0.1.0-draft"),
];

/// Adds everything in [`PROVIDED`] to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<ComponentState>) -> anyhow::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    wasmtime_wasi_config::add_to_linker(linker, |s: &mut ComponentState| {
        wasmtime_wasi_config::WasiConfig::new(&s.config)
    })?;
    super::keyvalue::add_to_linker(linker)?;
    super::logging::add_to_linker(linker)?;
    Ok(())
}

/// What Hearth supports, for error messages.
fn supported() -> String {
    let mut packages: Vec<&str> = PROVIDED
        .iter()
        .map(|(name, _)| name.split('/').next().unwrap_or(name))
        .collect();
    packages.dedup();
    format!(
        "Hearth runs components of the wasi:http/proxy world (0.2.x), which may import {} \
         (wasi:config at 0.2.0-rc.1, wasi:keyvalue at 0.2.0-draft, wasi:logging at \
         0.1.0-draft)",
        packages.join(", ")
    )
}

/// Whether `import` (`ns:pkg/iface@version`) is one Hearth provides.
fn provided(import: &str) -> bool {
    let (name, version) = import.split_once('@').unwrap_or((import, ""));
    PROVIDED.iter().any(|(n, track)| {
        *n == name
            && (version == *track
                || version
                    .strip_prefix(track)
                    .is_some_and(|rest| rest.starts_with('.')))
    })
}

/// Checks that `component` is a wasi:http/proxy component whose every
/// import Hearth provides, and links it.
pub(crate) fn link(
    engine: &wasmtime::Engine,
    linker: &Linker<ComponentState>,
    component: &Component,
) -> Result<ProxyPre<ComponentState>, DeployError> {
    let ty = component.component_type();
    let missing: Vec<&str> = ty
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !provided(name))
        .collect();
    if !missing.is_empty() {
        return Err(DeployError::NotAFunction(format!(
            "it imports {}, which Hearth does not provide; {}",
            missing.join(", "),
            supported()
        )));
    }
    let exports: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
    let handler = exports
        .iter()
        .find(|name| name.split('@').next() == Some(HANDLER));
    match handler {
        Some(name) if !name.ends_with("@0.2") && !name.contains("@0.2.") => {
            return Err(DeployError::NotAFunction(format!(
                "it exports {name}, a version Hearth does not run; {}",
                supported()
            )));
        }
        Some(_) => {}
        None => {
            let what = if exports.iter().any(|e| e.starts_with("wasi:cli/run@")) {
                "it is a wasi:cli command component (it exports wasi:cli/run), not an HTTP handler"
                    .to_string()
            } else if exports.is_empty() {
                "it exports nothing".to_string()
            } else {
                format!("it exports {}", exports.join(", "))
            };
            return Err(DeployError::NotAFunction(format!(
                "{what}: a function component exports {HANDLER}@0.2.x; {}",
                supported()
            )));
        }
    }
    let pre = linker.instantiate_pre(component).map_err(|e| {
        DeployError::NotAFunction(format!("its imports do not link: {e:#}; {}", supported()))
    })?;
    ProxyPre::new(pre).map_err(|e| {
        DeployError::NotAFunction(format!(
            "its {HANDLER} export does not have the wasi:http/proxy type: {e:#}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_match_by_interface_and_version_track() {
        assert!(provided("wasi:http/types@0.2.0"));
        assert!(provided("wasi:http/types@0.2.12"));
        assert!(provided("wasi:config/store@0.2.0-rc.1"));
        assert!(!provided("wasi:http/types@0.3.0-rc-2025-09-16"));
        assert!(!provided("wasi:http/types@0.20.0"));
        assert!(!provided("wasi:config/store@0.2.0-draft"));
        assert!(!provided("wasi:nn/graph@0.2.0"));
        assert!(!provided("my:app/helpers"));
    }
}
