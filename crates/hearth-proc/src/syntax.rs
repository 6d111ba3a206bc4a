//! Deploy-time syntax checks: a syntax error is a 400 at deploy, with its
//! position, rather than a failure at the first request.

use std::path::Path;
use std::time::Duration;

use hearth_host::DeployError;

use crate::bundle::Bundle;
use hearth_core::HandlerName;

/// What the Python check runs: compile the entry (syntax errors with their
/// position), then look for the handler among the names the module binds
/// at top level (`def`, `class`, assignments, imports, also inside
/// top-level `if`/`try`/`with`/`for`). A module that binds names in ways
/// this cannot see (`from x import *`, `globals()`, `exec`, `setattr`)
/// passes: the import at the first invocation decides.
const PYTHON_CHECK: &str = r#"
import ast, sys
src = sys.stdin.buffer.read()
try:
    tree = compile(src, sys.argv[1], "exec", ast.PyCF_ONLY_AST)
    compile(tree, sys.argv[1], "exec")
except SyntaxError as e:
    print(f"syntax error: {e.filename}, line {e.lineno}, column {e.offset}: {e.msg}")
    sys.exit(1)
bound, dynamic = set(), False
def visit(node):
    global dynamic
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(child.name)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            for a in child.names:
                if a.name == "*":
                    dynamic = True
                bound.add(a.asname or a.name.split(".")[0])
        elif isinstance(child, ast.Name):
            if isinstance(child.ctx, ast.Store):
                bound.add(child.id)
            elif child.id in ("globals", "exec", "setattr", "vars", "locals"):
                dynamic = True
        if not isinstance(child, ast.Lambda):
            visit(child)
visit(tree)
wanted = sys.argv[2:]
if not dynamic and not any(w in bound for w in wanted):
    sys.exit(2)
"#;

/// Compiles the entry file with `python` (without running it), and checks
/// that it defines one of [`python_handlers`].
pub(crate) async fn check_python(
    python: &Path,
    bundle: &Bundle,
    entry: &str,
    handler: Option<&HandlerName>,
) -> Result<(), DeployError> {
    let source = bundle.file(entry).unwrap_or_default().to_vec();
    let wanted = python_handlers(handler);
    let mut cmd = tokio::process::Command::new(python);
    cmd.args(["-I", "-S", "-c", PYTHON_CHECK, entry])
        .args(&wanted);
    let (code, text) = run_check(&mut cmd, source).await?;
    match code {
        Some(0) => Ok(()),
        Some(2) => Err(DeployError::NotAFunction(missing_handler(
            entry, handler, &wanted,
        ))),
        _ => Err(DeployError::Invalid(one_line(&text))),
    }
}

/// The names a Python entry is searched for, in order: the handler
/// setting's function, or `handler`, `main`, `lambda_handler`. The deploy
/// check and the helper (in its `load` message) both take them from here.
pub(crate) fn python_handlers(handler: Option<&HandlerName>) -> Vec<&str> {
    match handler {
        Some(h) => vec![h.function()],
        None => vec!["handler", "main", "lambda_handler"],
    }
}

fn missing_handler(entry: &str, handler: Option<&HandlerName>, wanted: &[&str]) -> String {
    match handler {
        Some(h) => format!(
            "{entry} defines no {} (the handler {h}): define it, or name another with --handler module.function",
            h.function()
        ),
        None => format!(
            "{entry} defines none of {}: define one, or name yours with --handler module.function (e.g. --handler {}.my_function)",
            wanted.join(", "),
            entry.rsplit_once('.').map_or(entry, |(m, _)| m)
        ),
    }
}

/// `node --check` on the entry file (as an ES module when it looks like
/// one); with a handler setting, the entry must at least name its function
/// (JavaScript exports are known only once the module runs).
pub(crate) async fn check_node(
    node: &Path,
    bundle: &Bundle,
    entry: &str,
    handler: Option<&HandlerName>,
) -> Result<(), DeployError> {
    let source = bundle.file(entry).unwrap_or_default().to_vec();
    if let Some(h) = handler {
        bundle
            .check_mentions(entry, h)
            .map_err(|e| DeployError::NotAFunction(e.to_string()))?;
    }
    let module = entry.ends_with(".mjs")
        || (!entry.ends_with(".cjs") && String::from_utf8_lossy(&source).contains("export "));
    let mut cmd = tokio::process::Command::new(node);
    cmd.arg("--check");
    if module {
        cmd.arg("--input-type=module");
    }
    let (code, text) = run_check(&mut cmd, source).await?;
    if code == Some(0) {
        return Ok(());
    }
    // node reads the source from stdin: name the user's file instead.
    Err(DeployError::Invalid(format!(
        "syntax error: {}",
        one_line(&text).replace("[stdin]", entry)
    )))
}

/// Runs a checker on `source` (its stdin): its exit code and output.
async fn run_check(
    cmd: &mut tokio::process::Command,
    source: Vec<u8>,
) -> Result<(Option<i32>, String), DeployError> {
    use tokio::io::AsyncWriteExt;
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| DeployError::Load(format!("cannot check syntax: {e}")))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&source).await;
    });
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .map_err(|_| DeployError::Load("the syntax check took too long".into()))?
        .map_err(|e| DeployError::Load(e.to_string()))?;
    let _ = writer.await;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    Ok((out.status.code(), text))
}

/// A checker's report on one line: node --check prints "[stdin]:3", the
/// source line, a caret under the column and the message, then a stack
/// and its version. The source line is cut to a window around the caret
/// (a minified file's line is the whole file).
fn one_line(text: &str) -> String {
    const WINDOW: usize = 60;
    let mut lines: Vec<String> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with("    at ") && !l.starts_with("Node.js "))
        .map(str::to_string)
        .collect();
    let caret = lines
        .iter()
        .position(|l| l.trim_start() == "^" || l.trim_start().starts_with("^^"));
    if let Some(i) = caret.filter(|&i| i > 0) {
        let col = lines[i].len() - lines[i].trim_start().len();
        let source = &lines[i - 1];
        let floor = |mut at: usize| {
            at = at.min(source.len());
            while !source.is_char_boundary(at) {
                at -= 1;
            }
            at
        };
        let (from, to) = (floor(col.saturating_sub(WINDOW)), floor(col + WINDOW));
        let cut = format!(
            "{}{}{}",
            if from > 0 { "…" } else { "" },
            &source[from..to],
            if to < source.len() { "…" } else { "" }
        );
        let caret_at = source[from..floor(col)].chars().count() + usize::from(from > 0);
        lines[i] = format!("{}^", " ".repeat(caret_at));
        lines[i - 1] = cut;
    }
    // Past some length node prints no caret: then the line's start.
    for line in &mut lines {
        if let Some((at, _)) = line.char_indices().nth(2 * WINDOW + 2) {
            line.truncate(at);
            line.push('…');
        }
    }
    lines.join(" | ")
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_long_source_line_is_cut_around_the_caret() {
        let line = format!("{}return (;{}", "a".repeat(5000), "b".repeat(5000));
        let report = format!(
            "[stdin]:1\n{line}\n{}^\n\nSyntaxError: Unexpected token ';'\n    at x\n\nNode.js v20\n",
            " ".repeat(5008)
        );
        let out = one_line(&report);
        assert!(out.len() < 300, "{} bytes: {out}", out.len());
        let parts: Vec<&str> = out.split(" | ").collect();
        assert_eq!(parts[0], "[stdin]:1");
        // The caret still points at the `;`.
        let at = parts[2].chars().count() - 1;
        assert_eq!(parts[1].chars().nth(at), Some(';'), "{out}");
        assert_eq!(parts[3], "SyntaxError: Unexpected token ';'");
        // Node prints no caret under a very long line: its start is kept.
        let report = format!("[stdin]:1\n{line}\n\nSyntaxError: Unexpected token ';'\n");
        let out = one_line(&report);
        assert!(out.len() < 300 && out.contains("aaa…"), "{out}");
        // A short line is left whole.
        let short = "[stdin]:2\n  return (;\n          ^\n\nSyntaxError: x\n";
        assert_eq!(
            one_line(short),
            "[stdin]:2 |   return (; |           ^ | SyntaxError: x"
        );
    }
}
