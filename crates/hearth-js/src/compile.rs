//! A bundle's JavaScript, compiled once to QuickJS bytecode.
//!
//! Every `.js`/`.mjs`/`.cjs` file of a bundle becomes a unit: ES modules as
//! module bytecode, CommonJS files as the bytecode of a script that
//! evaluates to `function (exports, require, module, __filename, __dirname)`
//! (sloppy mode, like Node). `.json` files are kept as text. A `.js` file
//! is an ES module when `package.json` says `"type": "module"` or when it
//! has `import`/`export` statements; otherwise CommonJS.
//!
//! The compiled form is cached on disk per artifact
//! (`<cache>/js-<engine>/<artifact>.qjsbc`) with a checksum, because
//! bytecode is trusted input to QuickJS: a file that does not match its
//! checksum is recompiled, never loaded.

use std::collections::BTreeMap;
use std::path::Path;

use displaydoc::Display;
use hearth_host::bundle::Bundle;
use rquickjs::{Context, Ctx, Module, Runtime, Value, WriteOptions, qjs};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// What a unit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Esm = 0,
    Cjs = 1,
    Json = 2,
}

/// One file of the bundle, ready to load.
#[derive(Debug, Clone)]
pub struct Unit {
    pub kind: Kind,
    /// Bytecode (ESM, CommonJS) or the text (JSON).
    pub bytes: Vec<u8>,
}

/// A version's code.
#[derive(Debug, Clone, Default)]
pub struct CompiledCode {
    pub entry: String,
    /// The handler setting's function name (not part of the compiled
    /// form: set by the version that loads it).
    pub handler: Option<String>,
    pub units: BTreeMap<String, Unit>,
}

/// Why a bundle's JavaScript does not compile.
#[derive(Debug, Display, Error)]
pub enum CompileError {
    /// {0}
    Syntax(String),
    /// {path} is not UTF-8 text
    NotUtf8 { path: String },
    /// {path} contains a NUL byte
    Nul { path: String },
    /// {path}: invalid JSON: {source}
    Json {
        path: String,
        source: serde_json::Error,
    },
    /// the entry {0} is not a JavaScript file
    EntryNotScript(String),
    /// {path}: could not write bytecode{detail}
    Bytecode { path: String, detail: String },
    /// QuickJS: {0}
    Engine(#[from] rquickjs::Error),
}

/// Compiles every script of `bundle`; the first syntax error is the error,
/// as `file:line:col: SyntaxError: message`.
pub fn compile(bundle: &Bundle, entry: &str) -> Result<CompiledCode, CompileError> {
    let rt = Runtime::new()?;
    // QuickJS looks imported modules up while compiling; at deploy time
    // they are only named, so every import gets an empty stand-in.
    rt.set_loader(StandIn, StandIn);
    let ctx = Context::full(&rt)?;
    let type_module = bundle
        .file("package.json")
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .is_some_and(|p| p["type"] == "module");
    ctx.with(|ctx| {
        let mut units = BTreeMap::new();
        for path in bundle.paths() {
            let kind = if path.ends_with(".mjs") {
                Kind::Esm
            } else if path.ends_with(".cjs") {
                Kind::Cjs
            } else if path.ends_with(".json") {
                Kind::Json
            } else if path.ends_with(".js") {
                let text = String::from_utf8_lossy(bundle.file(path).unwrap_or_default());
                if type_module || has_esm_syntax(&text) {
                    Kind::Esm
                } else {
                    Kind::Cjs
                }
            } else {
                continue;
            };
            let source = bundle.file(path).unwrap_or_default();
            let text = std::str::from_utf8(source).map_err(|_| CompileError::NotUtf8 {
                path: path.to_string(),
            })?;
            let bytes = match kind {
                Kind::Esm => compile_module(&ctx, path, text)?,
                Kind::Cjs => compile_cjs(&ctx, path, text)?,
                Kind::Json => {
                    serde_json::from_str::<serde_json::Value>(text).map_err(|source| {
                        CompileError::Json {
                            path: path.to_string(),
                            source,
                        }
                    })?;
                    source.to_vec()
                }
            };
            units.insert(path.to_string(), Unit { kind, bytes });
        }
        if !units.contains_key(entry) {
            return Err(CompileError::EntryNotScript(entry.to_string()));
        }
        Ok(CompiledCode {
            entry: entry.to_string(),
            handler: None,
            units,
        })
    })
}

struct StandIn;

impl rquickjs::loader::Resolver for StandIn {
    fn resolve<'js>(
        &mut self,
        _ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _attributes: Option<rquickjs::loader::ImportAttributes<'js>>,
    ) -> rquickjs::Result<String> {
        Ok(format!("{base} -> {name}"))
    }
}

impl rquickjs::loader::Loader for StandIn {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<rquickjs::loader::ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, rquickjs::module::Declared>> {
        Module::declare(ctx.clone(), name, "")
    }
}

/// `import`/`export` at the start of a line (not `import(`).
fn has_esm_syntax(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        (l.starts_with("import ") || l.starts_with("import{") || l.starts_with("import\""))
            || l.starts_with("import'")
            || l.starts_with("export ")
            || l.starts_with("export{")
    })
}

fn compile_module(ctx: &Ctx<'_>, path: &str, text: &str) -> Result<Vec<u8>, CompileError> {
    match Module::declare(ctx.clone(), path, text) {
        Ok(m) => m
            .write(WriteOptions::default())
            .map_err(|e| CompileError::Bytecode {
                path: path.to_string(),
                detail: format!(" ({e})"),
            }),
        Err(_) => Err(CompileError::Syntax(syntax_error(ctx, path))),
    }
}

/// The CommonJS wrapper, on one line so that line numbers stay the file's.
/// It returns the file's top-level `main`, if it declares one: OpenWhisk's
/// documentation writes actions as a script with `function main(params)`
/// and no export (its runtime evaluates the file and looks the name up).
fn cjs_wrapper(text: &str) -> String {
    format!(
        "(function (exports, require, module, __filename, __dirname) {{{text}\n;return typeof main === \"function\" ? main : undefined;\n}})"
    )
}

fn compile_cjs(ctx: &Ctx<'_>, path: &str, text: &str) -> Result<Vec<u8>, CompileError> {
    compile_script(ctx, path, &cjs_wrapper(text))
}

/// Compiles a classic (sloppy-mode, global) script to bytecode.
pub fn compile_script(ctx: &Ctx<'_>, path: &str, source: &str) -> Result<Vec<u8>, CompileError> {
    let nul = || CompileError::Nul {
        path: path.to_string(),
    };
    let name = std::ffi::CString::new(path).map_err(|_| nul())?;
    // QuickJS's parser reads up to a NUL terminator, whatever the length.
    let source = std::ffi::CString::new(source).map_err(|_| nul())?;
    // SAFETY: the context is live for this call; `source` and `name` outlive
    // it; the returned value is owned by `Value::from_raw` and freed with it.
    let compiled = unsafe {
        let raw = qjs::JS_Eval(
            ctx.as_raw().as_ptr(),
            source.as_ptr(),
            source.as_bytes().len() as _,
            name.as_ptr(),
            (qjs::JS_EVAL_TYPE_GLOBAL | qjs::JS_EVAL_FLAG_COMPILE_ONLY) as i32,
        );
        if qjs::JS_IsException(raw) {
            return Err(CompileError::Syntax(syntax_error(ctx, path)));
        }
        Value::from_raw(ctx.clone(), raw)
    };
    // SAFETY: as above; the buffer JS_WriteObject returns is copied, then
    // freed with the context's allocator.
    unsafe {
        let mut len: qjs::size_t = 0;
        let buf = qjs::JS_WriteObject(
            ctx.as_raw().as_ptr(),
            &mut len,
            compiled.as_raw(),
            qjs::JS_WRITE_OBJ_BYTECODE as i32,
        );
        if buf.is_null() {
            return Err(CompileError::Bytecode {
                path: path.to_string(),
                detail: String::new(),
            });
        }
        let out = std::slice::from_raw_parts(buf, len as usize).to_vec();
        qjs::js_free(ctx.as_raw().as_ptr(), buf.cast());
        Ok(out)
    }
}

/// Evaluates script bytecode made by `compile_script` and returns its
/// completion value (for CommonJS: the wrapper function).
///
/// # Safety
/// `bytes` must come from `compile_script` with this QuickJS build (the disk
/// cache checks a checksum before handing bytes here).
pub unsafe fn load_cjs<'js>(ctx: &Ctx<'js>, bytes: &[u8]) -> rquickjs::Result<Value<'js>> {
    // SAFETY: the caller vouches for the bytes; exceptions are turned into
    // errors; returned values are owned by `Value`.
    unsafe {
        let raw = ctx.as_raw().as_ptr();
        let obj = qjs::JS_ReadObject(
            raw,
            bytes.as_ptr(),
            bytes.len() as _,
            qjs::JS_READ_OBJ_BYTECODE as i32,
        );
        if qjs::JS_IsException(obj) {
            return Err(rquickjs::Error::Exception);
        }
        let f = qjs::JS_EvalFunction(raw, obj);
        if qjs::JS_IsException(f) {
            return Err(rquickjs::Error::Exception);
        }
        Ok(Value::from_raw(ctx.clone(), f))
    }
}

/// `file:line:col: SyntaxError: message` from the pending exception.
fn syntax_error(ctx: &Ctx<'_>, path: &str) -> String {
    let exc = ctx.catch();
    let (name, message, stack) = match exc.as_object() {
        Some(o) => (
            o.get::<_, String>("name")
                .unwrap_or_else(|_| "Error".into()),
            o.get::<_, String>("message").unwrap_or_default(),
            o.get::<_, String>("stack").unwrap_or_default(),
        ),
        None => ("Error".into(), format!("{exc:?}"), String::new()),
    };
    // QuickJS puts the position in the stack: "    at index.mjs:3:10".
    let position = stack
        .lines()
        .find_map(|l| l.trim().strip_prefix("at "))
        .map(|p| p.trim_start_matches('<').trim_end_matches('>').to_string())
        .filter(|p| p.starts_with(path))
        .unwrap_or_else(|| path.to_string());
    format!("{position}: {name}: {message}")
}

// ---------------------------------------------------------------- disk cache

const MAGIC: &[u8; 8] = b"HEARTHJS";

/// Serializes `code`: magic, sha256 of the rest, then entry and units.
pub fn encode(code: &CompiledCode) -> Vec<u8> {
    let mut body = Vec::new();
    put(&mut body, code.entry.as_bytes());
    for (path, unit) in &code.units {
        put(&mut body, path.as_bytes());
        body.push(unit.kind as u8);
        put(&mut body, &unit.bytes);
    }
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&Sha256::digest(&body));
    out.extend_from_slice(&body);
    out
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The inverse of [`encode`]; `None` for anything damaged.
pub fn decode(bytes: &[u8]) -> Option<CompiledCode> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    if rest.len() < 32 || Sha256::digest(&rest[32..]).as_slice() != &rest[..32] {
        return None;
    }
    let mut cur = &rest[32..];
    let take = |cur: &mut &[u8]| -> Option<Vec<u8>> {
        let n = u32::from_le_bytes(cur.get(..4)?.try_into().ok()?) as usize;
        let v = cur.get(4..4 + n)?.to_vec();
        *cur = &cur[4 + n..];
        Some(v)
    };
    let entry = String::from_utf8(take(&mut cur)?).ok()?;
    let mut units = BTreeMap::new();
    while !cur.is_empty() {
        let path = String::from_utf8(take(&mut cur)?).ok()?;
        let kind = match *cur.first()? {
            0 => Kind::Esm,
            1 => Kind::Cjs,
            2 => Kind::Json,
            _ => return None,
        };
        cur = &cur[1..];
        let bytes = take(&mut cur)?;
        units.insert(path, Unit { kind, bytes });
    }
    Some(CompiledCode {
        entry,
        handler: None,
        units,
    })
}

/// Reads the cached compile of `artifact`, or compiles and caches it.
pub fn load_or_compile(
    cache_dir: &Path,
    artifact: &str,
    bundle: &Bundle,
    entry: &str,
) -> Result<CompiledCode, CompileError> {
    let path = cache_dir.join(format!("{artifact}.qjsbc"));
    if let Ok(bytes) = std::fs::read(&path) {
        if let Some(code) = decode(&bytes).filter(|c| c.entry == entry) {
            return Ok(code);
        }
        tracing::warn!(path = %path.display(), "damaged bytecode cache entry; recompiling");
    }
    let code = compile(bundle, entry)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, encode(&code)).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_core::Runtime as Rt;

    fn bundle(files: &[(&str, &str)]) -> Bundle {
        let mut b = tar::Builder::new(Vec::new());
        for (p, text) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(text.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, p, text.as_bytes()).unwrap();
        }
        Bundle::from_upload(Rt::Js, None, &b.into_inner().unwrap()).unwrap()
    }

    #[test]
    fn files_become_esm_cjs_or_json_units() {
        let b = bundle(&[
            (
                "index.mjs",
                "import x from './lib.js';\nexport default { fetch() {} };\n",
            ),
            ("lib.js", "module.exports = 1;\n"),
            ("esm.js", "export const y = 2;\n"),
            ("data.json", "{\"a\": 1}"),
            ("README.md", "# not code"),
        ]);
        let code = compile(&b, "index.mjs").unwrap();
        let kinds: Vec<_> = code
            .units
            .iter()
            .map(|(p, u)| (p.as_str(), u.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("data.json", Kind::Json),
                ("esm.js", Kind::Esm),
                ("index.mjs", Kind::Esm),
                ("lib.js", Kind::Cjs)
            ]
        );
        let again = decode(&encode(&code)).unwrap();
        assert_eq!(again.units["lib.js"].bytes, code.units["lib.js"].bytes);
        let mut damaged = encode(&code);
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert!(decode(&damaged).is_none(), "a flipped bit is caught");
    }

    #[test]
    fn syntax_errors_name_file_line_and_column() {
        let b = bundle(&[(
            "index.mjs",
            "export default {\n  fetch() { return 1 +; }\n};\n",
        )]);
        let err = compile(&b, "index.mjs").unwrap_err().to_string();
        assert!(err.starts_with("index.mjs:2:"), "{err}");
        assert!(err.contains("SyntaxError"), "{err}");
        let b = bundle(&[(
            "h.js",
            "exports.handler = async (e) => {\n\n  return (;\n};\n",
        )]);
        let err = compile(&b, "h.js").unwrap_err();
        assert!(matches!(err, CompileError::Syntax(_)), "{err}");
        assert!(err.to_string().starts_with("h.js:3:"), "{err}");
    }
}

/// A compiled-code cache file is read back from disk: whatever its body
/// holds under a checksum that matches, decoding never panics.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};

    use super::*;

    proptest! {
        #[test]
        fn no_checksummed_body_makes_decoding_panic(
            body in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut file = MAGIC.to_vec();
            file.extend_from_slice(&Sha256::digest(&body));
            file.extend_from_slice(&body);
            let _ = decode(&file);
        }
    }
}
