//! Readable differences between a recorded outcome and a replayed one.

use std::fmt::Write;

use hearth_core::Response;

use crate::Outcome;

/// `None` if the outcomes are the same; else a unified-diff-like text:
/// `-` is what the tape holds, `+` what the replay produced.
pub fn outcome_diff(recorded: &Outcome, replayed: &Outcome) -> Option<String> {
    if recorded == replayed {
        return None;
    }
    let mut out = String::new();
    match (recorded, replayed) {
        (Outcome::Response(a), Outcome::Response(b)) => response_diff(&mut out, a, b),
        (a, b) => {
            let _ = writeln!(out, "-{}", summary(a));
            let _ = writeln!(out, "+{}", summary(b));
        }
    }
    Some(out)
}

fn summary(o: &Outcome) -> String {
    match o {
        Outcome::Response(r) => format!("{} ({} bytes)", r.status, r.body.len()),
        Outcome::Error {
            kind,
            status,
            message,
        } => format!("{status} {kind}: {message}"),
    }
}

fn response_diff(out: &mut String, a: &Response, b: &Response) {
    if a.status != b.status {
        let _ = writeln!(out, "-status {}\n+status {}", a.status, b.status);
    }
    for (k, v) in &a.headers {
        if !b.headers.iter().any(|(k2, v2)| k2 == k && v2 == v) {
            let _ = writeln!(out, "-{k}: {v}");
        }
    }
    for (k, v) in &b.headers {
        if !a.headers.iter().any(|(k2, v2)| k2 == k && v2 == v) {
            let _ = writeln!(out, "+{k}: {v}");
        }
    }
    if a.body == b.body {
        return;
    }
    match (std::str::from_utf8(&a.body), std::str::from_utf8(&b.body)) {
        (Ok(x), Ok(y)) => {
            let diff = similar::TextDiff::from_lines(x, y);
            let _ = write!(
                out,
                "{}",
                diff.unified_diff()
                    .context_radius(2)
                    .header("recorded body", "replayed body")
            );
            if !x.ends_with('\n') || !y.ends_with('\n') {
                out.push('\n');
            }
        }
        _ => {
            let _ = writeln!(
                out,
                "-body: {} bytes (binary)\n+body: {} bytes (binary)",
                a.body.len(),
                b.body.len()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(status: u16, body: &str) -> Outcome {
        Outcome::Response(Response {
            status,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: body.to_string().into(),
        })
    }

    #[test]
    fn a_changed_body_line_is_shown_as_minus_and_plus() {
        assert_eq!(
            outcome_diff(&resp(200, "a\nb\n"), &resp(200, "a\nb\n")),
            None
        );
        let d = outcome_diff(&resp(200, "a\nold\n"), &resp(201, "a\nnew\n")).unwrap();
        assert!(d.contains("-status 200\n+status 201"), "{d}");
        assert!(d.contains("-old\n") && d.contains("+new\n"), "{d}");
        let err = Outcome::Error {
            kind: "trap".into(),
            status: 500,
            message: "boom".into(),
        };
        let d = outcome_diff(&err, &resp(200, "fine")).unwrap();
        assert!(
            d.contains("-500 trap: boom") && d.contains("+200 (4 bytes)"),
            "{d}"
        );
    }
}
