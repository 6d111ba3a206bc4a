//! `JSON.stringify`, `Response.json` and the responses' options. Every
//! value's type is known when compiling, so stringifying is code written
//! out for that type: brackets, keys and commas appended as literals,
//! strings and numbers by the runtime's string builder (`sb_*` in
//! `hearth-jit-runtime`'s `abi.rs`).

use wasm_encoder::{BlockType, Instruction as I, ValType};

use super::*;

/// What a response's body is made from.
pub(super) enum Body<'e> {
    /// `new Response(x)`: `x` as a string (or empty).
    Text(Option<&'e Expr>),
    /// `Response.json(x)`: `JSON.stringify(x)`.
    Json(&'e Expr),
}

impl FnBuilder<'_, '_> {
    /// `JSON.stringify(x)`: pushes the string.
    pub(super) fn json_stringify(&mut self, x: &Expr) -> R<()> {
        let t = self.expr(x)?;
        let v = self.local(
            t.val()
                .ok_or_else(|| Refused::new(format!("JSON.stringify of a {t:?}")))?,
        );
        self.emit(I::LocalSet(v));
        let sb = self.local(ValType::I32);
        self.emit(I::Call(SB_NEW));
        self.emit(I::LocalSet(sb));
        self.json_value(sb, v, &t)?;
        self.emit(I::LocalGet(sb));
        self.emit(I::I32Load(mem(0, 2)));
        Ok(())
    }

    /// Appends literal text to builder `sb`.
    fn json_text(&mut self, sb: u32, text: &str) {
        let at = self.m.str_addr(text);
        self.emit(I::LocalGet(sb));
        self.emit(I::I32Const(at));
        self.emit(I::Call(SB_PUSH));
    }

    /// Appends the JSON of local `v`, of type `t`, to builder `sb`.
    fn json_value(&mut self, sb: u32, v: u32, t: &Ty) -> R<()> {
        match t {
            Ty::Num => {
                self.emit(I::LocalGet(sb));
                self.emit(I::LocalGet(v));
                self.emit(I::Call(SB_NUM));
            }
            Ty::Str => {
                self.emit(I::LocalGet(sb));
                self.emit(I::LocalGet(v));
                self.emit(I::Call(SB_QUOTE));
            }
            Ty::Bool => {
                let (yes, no) = (self.m.str_addr("true"), self.m.str_addr("false"));
                self.emit(I::LocalGet(sb));
                self.emit(I::I32Const(yes));
                self.emit(I::I32Const(no));
                self.emit(I::LocalGet(v));
                self.emit(I::Select);
                self.emit(I::Call(SB_PUSH));
            }
            Ty::Arr(elem) => {
                let elem = (**elem).clone();
                let ev = self.local(elem.val().unwrap_or(ValType::I32));
                self.json_text(sb, "[");
                self.for_each_index(v, |f, i| {
                    f.emit(I::LocalGet(i));
                    f.emit(I::If(BlockType::Empty));
                    f.json_text(sb, ",");
                    f.emit(I::End);
                    f.arr_elem_addr(v, i, &elem);
                    f.load(&elem);
                    f.emit(I::LocalSet(ev));
                    f.json_value(sb, ev, &elem)
                })?;
                self.json_text(sb, "]");
            }
            Ty::Obj(fields) => {
                if fields.is_empty() {
                    self.json_text(sb, "{}");
                }
                for (k, (key, ft)) in fields.iter().enumerate() {
                    let key = json_key(key)?;
                    let open = if k == 0 { "{" } else { "," };
                    self.json_text(sb, &format!("{open}{key}:"));
                    let fv = self.local(ft.val().unwrap_or(ValType::I32));
                    self.emit(I::LocalGet(v));
                    self.load_at(ft, 8 * k as u64);
                    self.emit(I::LocalSet(fv));
                    self.json_value(sb, fv, ft)?;
                }
                if !fields.is_empty() {
                    self.json_text(sb, "}");
                }
            }
            t => return refuse(format!("JSON.stringify of a {t:?}")),
        }
        Ok(())
    }

    /// A response: its body, then its options (`{ status, headers }`), as
    /// JavaScript evaluates them.
    pub(super) fn make_response(&mut self, body: Body<'_>, init: Option<&Expr>) -> R<Ty> {
        let b = self.local(ValType::I32);
        let default_type = match body {
            Body::Text(Some(x)) => {
                self.string_of(x)?;
                "text/plain;charset=UTF-8"
            }
            Body::Text(None) => {
                let empty = self.m.str_addr("");
                self.emit(I::I32Const(empty));
                "text/plain;charset=UTF-8"
            }
            Body::Json(x) => {
                self.json_stringify(x)?;
                "application/json"
            }
        };
        self.emit(I::LocalSet(b));
        let r = self.local(ValType::I32);
        self.emit(I::I32Const(16));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalSet(r));
        self.emit(I::LocalGet(r));
        let mut headers = vec![];
        match init {
            None => self.emit(I::F64Const(200.0.into())),
            Some(Expr {
                kind: ExprKind::Object(props),
                id,
                start,
                ..
            }) => {
                if id.is_some_and(|id| self.m.trace.mask(id) == 0) {
                    return Err(Stop::Unreached(*start));
                }
                let mut status = false;
                for (key, value) in props {
                    match key.as_str() {
                        "status" => {
                            self.num(value)?;
                            status = true;
                        }
                        "headers" => headers = header_lines(value)?,
                        _ => return refuse(format!("the Response option `{key}`")),
                    }
                }
                if !status {
                    self.emit(I::F64Const(200.0.into()));
                }
            }
            Some(_) => return refuse("Response options that are not an object literal"),
        }
        self.emit(I::F64Store(mem(0, 3)));
        self.emit(I::LocalGet(r));
        self.emit(I::LocalGet(b));
        self.emit(I::I32Store(mem(layout::RESP_BODY, 2)));
        // As the isolate's `Headers` lists them: sorted, the body's
        // content type unless one was given.
        if !headers.iter().any(|(k, _)| k == "content-type") {
            headers.push(("content-type".into(), default_type.into()));
        }
        headers.sort();
        let block: String = headers.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
        let at = self.m.blob(block.as_bytes());
        self.emit(I::LocalGet(r));
        self.emit(I::I32Const(at as i32));
        self.emit(I::I32Store(mem(layout::RESP_HEADERS, 2)));
        self.emit(I::LocalGet(r));
        Ok(Ty::Response)
    }
}

/// `"key"`, as `JSON.stringify` writes a key that needs no escaping (a
/// key that would is refused: such keys are rare in handlers).
fn json_key(key: &str) -> R<String> {
    if key.chars().any(|c| c < ' ' || c == '"' || c == '\\') {
        return refuse(format!("JSON.stringify of the key {key:?}"));
    }
    Ok(format!("\"{key}\""))
}

/// The header lines of a `headers: { name: "value", … }` option (of a
/// response, or of a `fetch`): names
/// lowercased, values trimmed (as `Headers` has them). Only literal
/// values are taken, printable ASCII, so no value can carry a line break
/// into the CGI output; `status` and `content-length`, which CGI reads
/// itself, are refused.
pub(super) fn header_lines(value: &Expr) -> R<Vec<(String, String)>> {
    let ExprKind::Object(props) = &value.kind else {
        return refuse("headers that are not an object literal");
    };
    let mut out: Vec<(String, String)> = vec![];
    for (key, v) in props {
        let name = key.to_ascii_lowercase();
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty()
            || !name.chars().all(token)
            || matches!(name.as_str(), "status" | "content-length")
            || out.iter().any(|(k, _)| *k == name)
        {
            return refuse(format!("the header `{key}`"));
        }
        let ExprKind::Str(units) = &v.kind else {
            return refuse(format!(
                "the header `{key}` set to something other than a string literal"
            ));
        };
        let text = String::from_utf16(units).unwrap_or_default();
        if !text.chars().all(|c| (' '..='~').contains(&c)) {
            return refuse(format!(
                "the header `{key}` with characters other than printable ASCII"
            ));
        }
        out.push((name, text.trim_matches(' ').to_string()));
    }
    Ok(out)
}
