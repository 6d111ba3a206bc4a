//! Builds the runtime compiled modules import (`crates/hearth-jit-runtime`)
//! for wasm32-unknown-unknown, and records where its memory's fixed part
//! ends: compiled modules put their data there.
//!
//! A nested cargo, with its own target directory and none of the outer
//! build's flags (cargo-fuzz's sanitizer passes, clippy's wrapper), as
//! Substrate's wasm-builder does. It needs the wasm32 standard library:
//! `rustup target add wasm32-unknown-unknown` (scripts/setup.sh does).

use std::path::PathBuf;
use std::process::Command;

const TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let runtime = here.join("../hearth-jit-runtime");
    println!("cargo:rerun-if-changed={}", runtime.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        runtime.join("Cargo.toml").display()
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args([
            "rustc",
            "--quiet",
            "--release",
            "--lib",
            "--crate-type",
            "cdylib",
        ])
        .args(["--target", TARGET])
        .arg("--manifest-path")
        .arg(runtime.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(out.join("runtime"))
        // No debug info in the module compiled code links to.
        .args(["--config", "profile.release.debug=false"])
        .args([
            "--",
            "-C",
            "link-arg=-zstack-size=8192",
            "-C",
            "strip=symbols",
        ]);
    for flags in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        build.env_remove(flags);
    }
    let status = build.status().expect("cargo runs");
    if !status.success() {
        panic!(
            "building the compiled tier's runtime for {TARGET} failed (above). If the error \
             is that `core` is missing for that target, install it: \
             `rustup target add {TARGET}` (scripts/setup.sh does)"
        );
    }
    let wasm = std::fs::read(out.join(format!("runtime/{TARGET}/release/hearth_jit_runtime.wasm")))
        .expect("the runtime was built");
    let end = heap_base(&wasm);
    std::fs::write(out.join("hearth_rt.wasm"), &wasm).expect("OUT_DIR is writable");
    std::fs::write(
        out.join("runtime_layout.rs"),
        format!(
            "/// Where the runtime's stack and data end in its memory: compiled\n\
             /// modules' data starts here.\n\
             pub const RUNTIME_END: u32 = {end};\n"
        ),
    )
    .expect("OUT_DIR is writable");
}

/// The value of the global the module exports as `__heap_base`.
fn heap_base(wasm: &[u8]) -> u32 {
    let mut globals = vec![];
    let mut export = None;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload.expect("the runtime is valid wasm") {
            wasmparser::Payload::GlobalSection(s) => {
                for g in s {
                    let g = g.expect("a global");
                    let mut ops = g.init_expr.get_operators_reader();
                    globals.push(match ops.read().expect("an init expression") {
                        wasmparser::Operator::I32Const { value } => Some(value as u32),
                        _ => None,
                    });
                }
            }
            wasmparser::Payload::ExportSection(s) => {
                for e in s {
                    let e = e.expect("an export");
                    if e.name == "__heap_base" {
                        export = Some(e.index as usize);
                    }
                }
            }
            _ => {}
        }
    }
    export
        .and_then(|i| globals.get(i).copied().flatten())
        .expect("the runtime exports `__heap_base` as a constant")
}
