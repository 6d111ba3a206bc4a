//! `wasi:logging` (0.1.0-draft): each message goes to the function's log
//! through the invocation's [`HostCtx`] (so on its tape, within its log
//! budget), at its level, prefixed with its context when it has one.

use hearth_core::LogStream;
use hearth_host::HostCtx;
use wasmtime::component::{HasData, Linker};

use super::host::ComponentState;

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit/logging",
        world: "wasi:logging/imports",
    });
}

use bindings::wasi::logging::logging::{Host, Level, add_to_linker as add};

pub(crate) struct Logging<'a>(Option<&'a HostCtx>);

struct HasLogging;

impl HasData for HasLogging {
    type Data<'a> = Logging<'a>;
}

pub(crate) fn add_to_linker(linker: &mut Linker<ComponentState>) -> anyhow::Result<()> {
    add::<_, HasLogging>(linker, |s| Logging(s.host()))?;
    Ok(())
}

impl Host for Logging<'_> {
    fn log(&mut self, level: Level, context: String, message: String) {
        let Some(host) = self.0 else { return };
        let level = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
            Level::Critical => "critical",
        };
        if context.is_empty() {
            host.log(LogStream::Log, level, &message);
        } else {
            host.log(LogStream::Log, level, &format!("{context}: {message}"));
        }
    }
}
