//! Deploy-time syntax checks: a syntax error is a 400 at deploy, with its
//! position, rather than a failure at the first request.

use std::path::Path;
use std::time::Duration;

use hearth_host::DeployError;

use crate::bundle::Bundle;

/// Compiles the entry file with `python` (without running it).
pub(crate) async fn check_python(
    python: &Path,
    bundle: &Bundle,
    entry: &str,
) -> Result<(), DeployError> {
    let source = bundle.file(entry).unwrap_or_default().to_vec();
    let script = "import sys\nsrc = sys.stdin.buffer.read()\ntry:\n    compile(src, sys.argv[1], 'exec')\nexcept SyntaxError as e:\n    print(f'{e.filename}, line {e.lineno}, column {e.offset}: {e.msg}')\n    sys.exit(1)\n";
    syntax_check(
        tokio::process::Command::new(python).args(["-I", "-S", "-c", script, entry]),
        source,
    )
    .await
}

/// `node --check` on the entry file (as an ES module when it looks like one).
pub(crate) async fn check_node(
    node: &Path,
    bundle: &Bundle,
    entry: &str,
) -> Result<(), DeployError> {
    let source = bundle.file(entry).unwrap_or_default().to_vec();
    let module = entry.ends_with(".mjs")
        || (!entry.ends_with(".cjs") && String::from_utf8_lossy(&source).contains("export "));
    let mut cmd = tokio::process::Command::new(node);
    cmd.arg("--check");
    if module {
        cmd.arg("--input-type=module");
    }
    syntax_check(&mut cmd, source).await
}

async fn syntax_check(
    cmd: &mut tokio::process::Command,
    source: Vec<u8>,
) -> Result<(), DeployError> {
    use tokio::io::AsyncWriteExt;
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| DeployError::Load(format!("cannot check syntax: {e}")))?;
    let mut stdin = child.stdin.take().unwrap();
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&source).await;
    });
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .map_err(|_| DeployError::Load("the syntax check took too long".into()))?
        .map_err(|e| DeployError::Load(e.to_string()))?;
    let _ = writer.await;
    if out.status.success() {
        return Ok(());
    }
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // node --check prints "[stdin]:3", the line, a caret and the message.
    let msg: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with("    at ") && !l.starts_with("Node.js "))
        .collect();
    Err(DeployError::Invalid(format!(
        "syntax error: {}",
        msg.join(" | ")
    )))
}
