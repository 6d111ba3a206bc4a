//! What an end-to-end test needs from the machine beyond Rust, asked for
//! at the test's first line with [`require!`](crate::require):
//!
//! ```text
//! #[tokio::test]
//! async fn members_share_a_store() {
//!     require!(Postgres);
//!     // …
//! }
//! ```
//!
//! With every tool there, nothing happens. With one missing, under CI
//! (`CI` set, as `.ci/run` does) the test fails at once, naming the tool
//! and how to get it: a run that must test everything does not go on to
//! fail late, deep inside. Elsewhere (a developer's `cargo test` on a
//! machine without chromium, say) the test is skipped, and said so: a
//! line on the terminal (past the test harness's capture) and one in
//! `$TMPDIR/hearth-skipped.txt`, which `test.sh` prints and counts in its
//! closing line. `./test.sh` installs every tool, so it skips nothing.

use std::io::Write;
use std::path::Path;

/// A tool from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// Debian's clang, lld and wasi-libc: C built to `wasm32-wasi`.
    Clang,
    /// `/usr/bin/python3`: the process tier's Python.
    Python,
    /// `/usr/bin/node` and npm: the process tier's Node.js.
    Node,
    /// PostgreSQL's server binaries (`initdb`, `pg_ctl`).
    Postgres,
    /// Debian's `nats-server` (JetStream built in).
    Nats,
    /// Debian's chromium and chromedriver: the console's browser tests.
    Chromium,
    /// `kubectl` (for `kubectl kustomize`).
    Kubectl,
    /// libseccomp's Python binding for `/usr/bin/python3` and util-linux's
    /// `setpriv`: a pod's seccomp profile and capabilities, applied to a
    /// local process (`scripts/seccomp-exec.py`).
    Seccomp,
    /// Prometheus' `promtool` (Debian's `prometheus`), to check `/metrics`.
    Promtool,
    /// What the component examples build with: clang, wasm-tools,
    /// wit-bindgen, componentize-py and componentize-js, as
    /// `scripts/component-tools.sh` installs and names them.
    ComponentTools,
}

impl Tool {
    /// Why it is not there, if it is not.
    pub fn missing(self) -> Option<String> {
        let file = |p: &str| Path::new(p).exists().then_some(()).ok_or(p.to_string());
        let on_path = |name: &str| {
            std::env::var_os("PATH")
                .into_iter()
                .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .any(|dir| dir.join(name).is_file())
                .then_some(())
                .ok_or(format!("{name} (on PATH)"))
        };
        let env = |var: &str| {
            std::env::var_os(var)
                .map(|_| ())
                .ok_or(format!("${var} (set by scripts/component-tools.sh)"))
        };
        let found: Vec<Result<(), String>> = match self {
            Tool::Clang => vec![on_path("clang"), file("/usr/include/wasm32-wasi/stdio.h")],
            Tool::Python => vec![file("/usr/bin/python3")],
            Tool::Node => vec![file("/usr/bin/node"), on_path("npm")],
            Tool::Postgres => vec![crate::temp_postgres::find_bin().map(drop)],
            Tool::Nats => vec![on_path("nats-server")],
            Tool::Chromium => vec![file("/usr/bin/chromium"), file("/usr/bin/chromedriver")],
            Tool::Kubectl => vec![on_path("kubectl")],
            Tool::Seccomp => vec![
                on_path("setpriv"),
                std::process::Command::new("/usr/bin/python3")
                    .args(["-c", "import seccomp"])
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
                    .then_some(())
                    .ok_or("the seccomp module of /usr/bin/python3".to_string()),
            ],
            Tool::Promtool => vec![on_path("promtool")],
            Tool::ComponentTools => vec![
                on_path("clang"),
                on_path("wasm-tools"),
                on_path("wit-bindgen"),
                env("HEARTH_COMPONENTIZE_PY"),
            ],
        };
        let missing: Vec<String> = found.into_iter().filter_map(Result::err).collect();
        (!missing.is_empty()).then(|| missing.join(", "))
    }

    /// How to get it.
    pub fn install(self) -> &'static str {
        match self {
            Tool::Clang => "apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32",
            Tool::Python => "apt-get install python3 python3-pip python3-venv",
            Tool::Node => "apt-get install nodejs npm",
            Tool::Postgres => "apt-get install postgresql",
            Tool::Nats => "apt-get install nats-server",
            Tool::Chromium => "scripts/browser-tools.sh (apt-get install chromium chromium-driver)",
            Tool::Kubectl => "scripts/kubernetes-tools.sh (apt-get install kubernetes-client)",
            Tool::Seccomp => "scripts/kubernetes-tools.sh (apt-get install python3-seccomp)",
            Tool::Promtool => "scripts/prometheus-tools.sh (apt-get install prometheus)",
            Tool::ComponentTools => "run the tests with ./test.sh (scripts/component-tools.sh)",
        }
    }
}

/// Whether the calling test may go on (see the module's documentation):
/// true with every tool there; else a panic under CI, and `false` after
/// recording the skip elsewhere.
pub fn require(tools: &[Tool]) -> bool {
    let missing: Vec<String> = tools
        .iter()
        .filter_map(|t| {
            t.missing()
                .map(|what| format!("{t:?}: {what} is missing ({})", t.install()))
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    // The test harness names each test's thread after the test.
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line = format!("{test} needs {}", missing.join("; "));
    if std::env::var_os("CI").is_some() {
        panic!("{line}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {line}");
    let list = std::env::temp_dir().join("hearth-skipped.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(list)
    {
        let _ = writeln!(f, "{line}");
    }
    false
}

/// Skips (or, under CI, fails) the calling test unless the machine has
/// every tool named: `require!(Postgres, Chromium)`. See [`require`].
#[macro_export]
macro_rules! require {
    ($($tool:ident),+ $(,)?) => {
        if !$crate::require(&[$($crate::Tool::$tool),+]) {
            return;
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool this test can make missing: `HEARTH_COMPONENTIZE_PY` unset
    /// in a child process (the environment is the process's).
    #[test]
    fn a_missing_tool_is_named_with_how_to_get_it() {
        if let Some(child) = std::env::var_os("HEARTH_REQUIRE_CHILD") {
            // SAFETY: this child process runs this one test, on one thread.
            unsafe { std::env::remove_var("HEARTH_COMPONENTIZE_PY") };
            let went_on = require(&[Tool::ComponentTools]);
            std::fs::write(child, format!("{went_on}")).unwrap();
            return;
        }
        let dir = std::env::temp_dir().join(format!("hearth-require-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let run = |ci: bool| {
            let answer = dir.join(format!("answer-{ci}"));
            let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
            cmd.args([
                "--exact",
                "require::tests::a_missing_tool_is_named_with_how_to_get_it",
            ])
            .env("HEARTH_REQUIRE_CHILD", &answer)
            .env("TMPDIR", &dir)
            .env_remove("CI");
            if ci {
                cmd.env("CI", "true");
            }
            let out = cmd.output().unwrap();
            (
                out.status.success(),
                std::fs::read_to_string(&answer).unwrap_or_default(),
                String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr),
            )
        };
        // Elsewhere: skipped, said on stderr and in the list.
        let (ok, went_on, out) = run(false);
        assert!(ok && went_on == "false", "{out}");
        assert!(
            out.contains("SKIPPED") && out.contains("HEARTH_COMPONENTIZE_PY"),
            "{out}"
        );
        let listed = std::fs::read_to_string(dir.join("hearth-skipped.txt")).unwrap();
        assert!(
            listed.contains("a_missing_tool_is_named_with_how_to_get_it needs ComponentTools"),
            "{listed}"
        );
        // Under CI: the test fails, naming the tool and the fix.
        let (ok, went_on, out) = run(true);
        assert!(!ok && went_on.is_empty(), "{out}");
        assert!(out.contains("scripts/component-tools.sh"), "{out}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
