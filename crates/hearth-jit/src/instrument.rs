//! The traced variant of a module: the same source with every traced
//! expression wrapped in a call that records what kind of value it had,
//! and a default export that logs the trace when the handler returns
//! (`docs/js-tier.md`, "Tracing").
//!
//! Wrapping is done on the text, at the parser's spans, so the module runs
//! in the isolate exactly as written, plus the recording calls:
//! `a + b` becomes `__ht(7,__ht(5,a) + __ht(6,b))`.

use crate::ir::*;

/// The log line that carries one invocation's trace starts with this.
pub const TRACE_PREFIX: &str = "hearth-trace:";

/// What the trace records of a value (one bit per kind seen), and of its
/// truthiness. The JavaScript side (`RUNTIME` below) must agree.
pub mod tag {
    pub const INT: u32 = 1;
    pub const DOUBLE: u32 = 2;
    pub const TRUE: u32 = 4;
    pub const FALSE: u32 = 8;
    pub const STRING: u32 = 16;
    pub const UNDEFINED: u32 = 32;
    pub const NULL: u32 = 64;
    pub const UINT8ARRAY: u32 = 128;
    pub const INT32ARRAY: u32 = 256;
    pub const FLOAT64ARRAY: u32 = 512;
    pub const ARRAY: u32 = 1024;
    pub const RESPONSE: u32 = 2048;
    pub const REQUEST: u32 = 4096;
    pub const OBJECT: u32 = 8192;
    pub const FUNCTION: u32 = 16384;
    pub const OTHER: u32 = 32768;
    pub const TRUTHY: u32 = 1 << 16;
    pub const FALSY: u32 = 1 << 17;
    pub const NUMBER: u32 = INT | DOUBLE;
    pub const BOOLEAN: u32 = TRUE | FALSE;
    /// Every bit that says what kind of value it was.
    pub const KINDS: u32 = TRUTHY - 1;
}

const RUNTIME: &str = r#"
const __hs = new Uint32Array(__HEARTH_TRACED__);
function __hk(v) {
  switch (typeof v) {
    case "number": return (v | 0) === v && !Object.is(v, -0) ? 1 : 2;
    case "boolean": return v ? 4 : 8;
    case "string": return 16;
    case "undefined": return 32;
    case "function": return 16384;
    case "object":
      if (v === null) return 64;
      if (v instanceof Uint8Array) return 128;
      if (v instanceof Int32Array) return 256;
      if (v instanceof Float64Array) return 512;
      if (Array.isArray(v)) return 1024;
      if (v instanceof Response) return 2048;
      if (v instanceof Request) return 4096;
      return 8192;
    default: return 32768;
  }
}
function __ht(i, v) { __hs[i] |= __hk(v) | (v ? 65536 : 131072); return v; }
function __hp(...a) { for (let i = 0; i + 1 < a.length; i += 2) __ht(a[i], a[i + 1]); return a[a.length - 1]; }
"#;

const EXPORT: &str = r#"
export default {
  async fetch(request, env, ctx) {
    try { return await __hearth_default.fetch(request, env, ctx); }
    finally { console.log("hearth-trace:" + Array.from(__hs, (m) => m.toString(36)).join(",")); }
  },
};
"#;

/// The traced variant of `source`, which [`lower`](crate::lower) made
/// `program` from.
pub fn instrument(source: &str, program: &Program) -> String {
    let mut marks: Vec<Mark> = vec![];
    for f in &program.funcs {
        let params: Vec<&Param> = f.params.iter().collect();
        if !params.is_empty() {
            let pairs: String = params
                .iter()
                .map(|p| format!("{},{},", p.id, p.name))
                .collect();
            if f.expression_body {
                // The body is `return expr`: record the parameters, then
                // evaluate it.
                if let Some(Stmt::Return(Some(e))) = f.body.first() {
                    marks.push(Mark::open(e.start, 0, format!("__hp({pairs}")));
                    marks.push(Mark::close(e.end, 0));
                }
            } else {
                marks.push(Mark::open(f.body_start, 0, format!("__hp({pairs}0);")));
            }
        }
        for s in &f.body {
            stmt(s, &mut marks, 1);
        }
    }
    // Openings at one place go outermost first; closings innermost first,
    // and before any opening there.
    marks.sort_by_key(|m| {
        (
            m.at,
            m.open,
            if m.open { m.depth } else { u32::MAX - m.depth },
        )
    });
    let mut out = String::with_capacity(source.len() * 2 + RUNTIME.len() + EXPORT.len());
    out.push_str(&RUNTIME.replace("__HEARTH_TRACED__", &program.traced.to_string()));
    let (export_start, export_end) = (program.export.0 as usize, program.export.1 as usize);
    let mut at = 0usize;
    for m in &marks {
        let pos = m.at as usize;
        copy(source, &mut out, at, pos, (export_start, export_end));
        at = pos.max(at);
        out.push_str(&m.text);
    }
    copy(
        source,
        &mut out,
        at,
        source.len(),
        (export_start, export_end),
    );
    out.push_str(EXPORT);
    out
}

/// Copies `source[from..to]`, with the `export default` range replaced.
fn copy(source: &str, out: &mut String, from: usize, to: usize, (es, ee): (usize, usize)) {
    let mut i = from;
    while i < to {
        if i == es && ee > es {
            out.push_str("const __hearth_default = ");
            i = ee;
            continue;
        }
        let next = if i < es && es < to { es } else { to };
        out.push_str(&source[i..next]);
        i = next;
    }
}

struct Mark {
    at: u32,
    /// Closings sort before openings at the same place.
    open: bool,
    depth: u32,
    text: String,
}

impl Mark {
    fn open(at: u32, depth: u32, text: String) -> Mark {
        Mark {
            at,
            open: true,
            depth,
            text,
        }
    }
    fn close(at: u32, depth: u32) -> Mark {
        Mark {
            at,
            open: false,
            depth,
            text: ")".into(),
        }
    }
}

fn stmt(s: &Stmt, marks: &mut Vec<Mark>, d: u32) {
    match s {
        Stmt::Let { init, .. } | Stmt::LetArray { init, .. } => expr(init, marks, d),
        Stmt::Expr(e) => expr(e, marks, d),
        Stmt::If(t, a, b) => {
            expr(t, marks, d);
            a.iter().chain(b).for_each(|s| stmt(s, marks, d));
        }
        Stmt::While(t, body) | Stmt::DoWhile(body, t) => {
            expr(t, marks, d);
            body.iter().for_each(|s| stmt(s, marks, d));
        }
        Stmt::For {
            init,
            test,
            update,
            body,
        } => {
            init.iter().chain(body).for_each(|s| stmt(s, marks, d));
            test.iter().chain(update).for_each(|e| expr(e, marks, d));
        }
        Stmt::ForOf { iter, body, .. } => {
            expr(iter, marks, d);
            body.iter().for_each(|s| stmt(s, marks, d));
        }
        Stmt::Return(Some(e)) => expr(e, marks, d),
        Stmt::Block(b) => b.iter().for_each(|s| stmt(s, marks, d)),
        Stmt::Return(None) | Stmt::Break | Stmt::Continue | Stmt::Func(_) => {}
    }
}

fn target(t: &Target, marks: &mut Vec<Mark>, d: u32) {
    match t {
        Target::Index(obj, idx) => {
            expr(obj, marks, d);
            expr(idx, marks, d);
        }
        Target::Member(obj, _) => expr(obj, marks, d),
        Target::Var(_) => {}
    }
}

fn expr(e: &Expr, marks: &mut Vec<Mark>, d: u32) {
    if let Some(id) = e.id {
        marks.push(Mark::open(e.start, d, format!("__ht({id},")));
        marks.push(Mark::close(e.end, d));
    }
    let d = d + 1;
    match &e.kind {
        ExprKind::Num(_)
        | ExprKind::Str(_)
        | ExprKind::Bool(_)
        | ExprKind::Var(_)
        | ExprKind::Arrow(_) => {}
        ExprKind::Bin(_, a, b)
        | ExprKind::Logic(_, a, b)
        | ExprKind::Coalesce(a, b)
        | ExprKind::Index(a, b) => {
            expr(a, marks, d);
            expr(b, marks, d);
        }
        ExprKind::Unary(_, a) | ExprKind::Member(a, _) | ExprKind::Await(a) => expr(a, marks, d),
        ExprKind::Update { target: t, .. } => target(t, marks, d),
        ExprKind::Assign {
            target: t, value, ..
        } => {
            target(t, marks, d);
            expr(value, marks, d);
        }
        ExprKind::Cond(a, b, c) => {
            expr(a, marks, d);
            expr(b, marks, d);
            expr(c, marks, d);
        }
        ExprKind::Call(_, args)
        | ExprKind::New(_, args)
        | ExprKind::Array(args)
        | ExprKind::Template(_, args) => args.iter().for_each(|a| expr(a, marks, d)),
        ExprKind::Method(obj, _, args) => {
            expr(obj, marks, d);
            args.iter().for_each(|a| expr(a, marks, d));
        }
        ExprKind::Object(props) => props.iter().for_each(|(_, v)| expr(v, marks, d)),
    }
}

/// What the traced runs saw: per traced expression, the [`tag`] bits of
/// every value it had.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub masks: Vec<u32>,
    /// Invocations merged in.
    pub runs: u32,
    /// The latest of those in a row that saw nothing the others had not.
    pub unchanged: u32,
}

impl Trace {
    pub fn new(traced: u32) -> Trace {
        Trace {
            masks: vec![0; traced as usize],
            runs: 0,
            unchanged: 0,
        }
    }

    /// Merges one invocation's trace line (as logged); `false` if the
    /// line is not a trace of this program.
    pub fn merge_line(&mut self, line: &str) -> bool {
        let Some(body) = line.strip_prefix(TRACE_PREFIX) else {
            return false;
        };
        let parsed: Option<Vec<u32>> = body
            .split(',')
            .map(|m| u32::from_str_radix(m, 36).ok())
            .collect();
        match parsed {
            Some(masks) if masks.len() == self.masks.len() => {
                let mut changed = false;
                for (a, b) in self.masks.iter_mut().zip(masks) {
                    changed |= *a | b != *a;
                    *a |= b;
                }
                self.runs += 1;
                self.unchanged = if changed { 0 } else { self.unchanged + 1 };
                true
            }
            _ => false,
        }
    }

    pub fn mask(&self, id: TraceId) -> u32 {
        self.masks.get(id as usize).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Merging counts the runs in a row that added nothing, which the node
    /// ends tracing on; a line of another program or none is not merged.
    #[test]
    fn merging_counts_runs_that_saw_nothing_new() {
        let mut t = Trace::new(3);
        assert!(t.merge_line("hearth-trace:1,0,10"));
        assert_eq!((t.runs, t.unchanged), (1, 0));
        assert!(t.merge_line("hearth-trace:1,0,0"));
        assert_eq!((t.runs, t.unchanged), (2, 1));
        assert!(t.merge_line("hearth-trace:2,0,10"));
        assert_eq!((t.runs, t.unchanged), (3, 0), "a new kind at 0");
        assert_eq!(t.masks, vec![3, 0, 36]);
        assert!(!t.merge_line("hearth-trace:1,0"), "another program's");
        assert!(!t.merge_line("hello"));
        assert!(!t.merge_line("hearth-trace:1,zz!,0"));
        assert_eq!(t.runs, 3);
    }
}
