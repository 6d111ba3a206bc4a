//! Libraries: core modules the node provides for modules to import whole,
//! by name, instantiated beside the importing module in its store. The
//! compiled js tier's runtime is one (`hearth_jit::RUNTIME`): every module
//! the compiler makes imports its memory and functions, as Javy's
//! dynamically linked modules import QuickJS.
//!
//! A module with no library imports is linked once into an
//! [`InstancePre`], as before. One that imports a library is linked per
//! instance: the library first, then the module with the library's
//! exports and the linker's host functions. Such a module must take its
//! memory from the library and define none, so its store has one memory,
//! which the sandbox's limiter holds to the function's limit.

use std::fmt;
use std::sync::Arc;

use hearth_host::DeployError;
use wasmtime::{ExternType, Instance, InstancePre, Linker, Module, Store};

use crate::sandbox::SandboxState;

/// A library's name (the import module) and its code.
#[derive(Clone)]
pub struct LibrarySource {
    pub name: &'static str,
    pub wasm: &'static [u8],
}

impl fmt::Debug for LibrarySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} bytes)", self.name, self.wasm.len())
    }
}

/// A library compiled and linked to the host functions.
pub(crate) struct Library {
    name: &'static str,
    module: Module,
    pre: InstancePre<SandboxState>,
}

impl Library {
    pub(crate) fn new(
        engine: &wasmtime::Engine,
        linker: &Linker<SandboxState>,
        source: &LibrarySource,
    ) -> wasmtime::Result<Library> {
        let module = Module::new(engine, source.wasm)?;
        let pre = linker.instantiate_pre(&module)?;
        Ok(Library {
            name: source.name,
            module,
            pre,
        })
    }
}

/// How a module's imports are met.
#[derive(Clone)]
pub(crate) enum Linked {
    /// From the linker's host functions alone: resolved once.
    Host(InstancePre<SandboxState>),
    /// From a library instantiated beside it, and the linker.
    WithLibrary {
        library: Arc<Library>,
        module: Module,
        linker: Arc<Linker<SandboxState>>,
    },
}

impl Linked {
    /// Links `module`: against the library it imports from, if any, each
    /// import checked now so that a module that would not instantiate is
    /// refused at deploy.
    pub(crate) fn new(
        module: &Module,
        linker: &Arc<Linker<SandboxState>>,
        libraries: &[Arc<Library>],
    ) -> Result<Linked, DeployError> {
        let refused = |why: String| {
            DeployError::NotAFunction(format!(
                "{why}; Hearth provides the `wasi_snapshot_preview1` and `hearth` import modules"
            ))
        };
        let Some(library) = libraries
            .iter()
            .find(|l| module.imports().any(|i| i.module() == l.name))
        else {
            return linker
                .instantiate_pre(module)
                .map(Linked::Host)
                .map_err(|e| refused(e.to_string()));
        };
        let mut memory_imported = false;
        for import in module.imports() {
            // The linker's imports are checked by a trial instantiation
            // (`WasmEngine::link`).
            if import.module() != library.name {
                continue;
            }
            let export = library.module.get_export(import.name());
            let fits = match (&import.ty(), &export) {
                (ExternType::Func(want), Some(ExternType::Func(have))) => have.matches(want),
                (ExternType::Memory(_), Some(ExternType::Memory(_))) => {
                    memory_imported = true;
                    true
                }
                _ => false,
            };
            if !fits {
                return Err(refused(format!(
                    "`{}::{}` is not a {} the library exports",
                    import.module(),
                    import.name(),
                    kind(&import.ty()),
                )));
            }
        }
        if !memory_imported || module.resources_required().num_memories > 0 {
            return Err(DeployError::NotAFunction(format!(
                "a module that imports `{}` must import its memory from it and define none",
                library.name
            )));
        }
        Ok(Linked::WithLibrary {
            library: library.clone(),
            module: module.clone(),
            linker: linker.clone(),
        })
    }

    pub(crate) async fn instantiate(
        &self,
        store: &mut Store<SandboxState>,
    ) -> wasmtime::Result<Instance> {
        match self {
            Linked::Host(pre) => pre.instantiate_async(store).await,
            Linked::WithLibrary {
                library,
                module,
                linker,
            } => {
                let lib = library.pre.instantiate_async(&mut *store).await?;
                let mut imports = Vec::with_capacity(module.imports().len());
                for import in module.imports() {
                    let found = if import.module() == library.name {
                        lib.get_export(&mut *store, import.name())
                    } else {
                        linker.get_by_import(&mut *store, &import)
                    };
                    imports.push(found.ok_or_else(|| {
                        wasmtime::format_err!(
                            "import `{}::{}` is not defined",
                            import.module(),
                            import.name()
                        )
                    })?);
                }
                Instance::new_async(store, module, &imports).await
            }
        }
    }
}

fn kind(ty: &ExternType) -> &'static str {
    match ty {
        ExternType::Func(_) => "function",
        ExternType::Memory(_) => "memory",
        ExternType::Global(_) => "global",
        ExternType::Table(_) => "table",
        _ => "item",
    }
}
