//! What a real node runs for a trace function: the wasm `hello` for a
//! short one, else a Python handler sleeping for the invocation's
//! duration, importing a library whose memory the colocation mode lets
//! handlers share (`tracelib`, a wheel written here).

use std::path::Path;

/// The wasm function short trace functions become.
pub(super) const HELLO_WAT: &[u8] = include_bytes!("../../../../examples/wasm/hello.wat");

/// A function shorter than this runs as wasm `hello`.
pub(super) const WASM_BELOW_MS: u64 = 20;

const SLEEPER_PY: &str = "import os, time\n\
SLEEP_S = int(os.environ['SLEEP_MS']) / 1000\n\
def handler(event, context):\n    time.sleep(SLEEP_S)\n    return 'ok'\n";

/// The library the Python functions import (`--real-import-mib`).
const LIBRARY: &str = "tracelib";
const LIBRARY_VERSION: &str = "1.0";

/// Writes `tracelib`'s wheel into `dir`: a module whose import builds
/// about `mib` MiB of Python objects and keeps them, as a library's
/// tables and caches are kept: an int → str dict of 8,400 entries a MiB
/// (16 asked built 17.5 MiB in a plain python3 here).
pub(super) fn write_library_wheel(dir: &Path, mib: u32) -> anyhow::Result<()> {
    use std::io::Write;
    let (name, version) = (LIBRARY, LIBRARY_VERSION);
    let file = std::fs::File::create(dir.join(format!("{name}-{version}-py3-none-any.whl")))?;
    let mut w = zip::ZipWriter::new(file);
    let module = format!(
        "# Made by `hearth-bench trace`: a stand-in for a heavy library.\n\
         TABLE = {{i: str(i) for i in range({entries})}}\n",
        entries = u64::from(mib) * 8400
    );
    let info = format!("{name}-{version}.dist-info");
    let files = [
        (format!("{name}/__init__.py"), module),
        (
            format!("{info}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"),
        ),
        (
            format!("{info}/WHEEL"),
            "Wheel-Version: 1.0\nGenerator: hearth\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .into(),
        ),
        (format!("{info}/top_level.txt"), format!("{name}\n")),
        (format!("{info}/RECORD"), String::new()),
    ];
    for (path, text) in files {
        w.start_file(path, zip::write::SimpleFileOptions::default())?;
        w.write_all(text.as_bytes())?;
    }
    w.finish()?;
    Ok(())
}

/// A Python function's code: the sleeper alone, or a tar bundle of the
/// sleeper importing the library, with its `requirements.txt`.
pub(super) fn python_code(import_mib: u32) -> anyhow::Result<(Vec<u8>, &'static str)> {
    if import_mib == 0 {
        return Ok((SLEEPER_PY.as_bytes().to_vec(), "handler.py"));
    }
    let code = format!("import {LIBRARY}\n{SLEEPER_PY}");
    let requirements = format!("{LIBRARY}=={LIBRARY_VERSION}\n");
    let mut tar = tar::Builder::new(Vec::new());
    for (path, text) in [("handler.py", code), ("requirements.txt", requirements)] {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, path, text.as_bytes())?;
    }
    Ok((tar.into_inner()?, "fn.tar"))
}
