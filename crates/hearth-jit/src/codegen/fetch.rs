//! Outbound HTTP and the environment from compiled code.
//!
//! `await fetch(url[, { method, headers, body }])` (or `hearth.fetch`)
//! goes through the wasm tier's `hearth.http_fetch`, the host call the
//! isolate's `fetch` makes, with the request the isolate's `Request`
//! would send: the URL as `new URL(url).href` has it (`hearth.url_href`,
//! the same WHATWG parser), the method upper-cased, the headers written
//! as literals, lowercased and sorted, with a string body's content type.
//! So the tape is the same whichever path ran, and the proof's strict
//! replay host answers the compiled request from an isolate tape only if
//! it is that request. What came back is read by `r.status`, `r.ok`,
//! `await r.text()` and `await r.json()`; response headers are not (the
//! import does not return them), so code reading them is refused.
//!
//! `env.NAME` (the handler's second parameter) and `process.env.NAME`
//! read WASI's environment, where the wasm tier lists the function's own
//! variables first.

use wasm_encoder::{Instruction as I, ValType};

use super::json::header_lines;
use super::*;
use hearth_jit_runtime::left;

/// What `fetch` answered, laid out as [`Ty::Fetched`].
mod answer {
    pub const STATUS: u64 = 0;
    pub const BODY: u64 = 4;
    pub const LEN: u64 = 8;
    /// Set once the body has been read (a second read throws).
    pub const READ: u64 = 12;
}

impl FnBuilder<'_, '_> {
    /// The URL and options of `inner` if it is a call of the platform's
    /// `fetch` or `hearth.fetch`.
    pub(super) fn fetch_of<'e>(&self, inner: &'e Expr) -> Option<&'e [Expr]> {
        match &inner.kind {
            ExprKind::Call(name, args) if name == "fetch" && self.lookup(name).is_none() => {
                Some(args)
            }
            ExprKind::Method(obj, name, args)
                if name == "fetch" && self.is_global(obj, "hearth") =>
            {
                Some(args)
            }
            _ => None,
        }
    }

    /// `await fetch(url[, init])` (`e`): pushes what it answered.
    pub(super) fn fetch(&mut self, e: &Expr, args: &[Expr]) -> R<Ty> {
        let (url, init) = match args {
            [url] => (url, None),
            [url, init] => (url, Some(init)),
            _ => return refuse("`fetch` with other than one or two arguments"),
        };
        let (u, body) = (self.local(ValType::I32), self.local(ValType::I32));
        self.string_of(url)?;
        self.emit(I::LocalSet(u));
        let mut method = "GET".to_string();
        let mut headers = vec![];
        let mut has_body = false;
        if let Some(init) = init {
            let ExprKind::Object(props) = &init.kind else {
                return refuse("`fetch` options that are not an object literal");
            };
            for (key, value) in props {
                match (key.as_str(), &value.kind) {
                    ("method", ExprKind::Str(units)) => {
                        method = String::from_utf16_lossy(units).to_uppercase();
                    }
                    ("method", _) => return refuse("a `fetch` method that is not a literal"),
                    ("headers", _) => headers = header_lines(value)?,
                    ("body", _) => {
                        self.string_of(value)?;
                        self.emit(I::LocalSet(body));
                        has_body = true;
                    }
                    _ => return refuse(format!("the `fetch` option `{key}`")),
                }
            }
        }
        if !method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return refuse(format!("the `fetch` method {method:?}"));
        }
        if has_body && (method == "GET" || method == "HEAD") {
            return refuse("a `fetch` with a body and the method GET or HEAD (it throws)");
        }
        // As the isolate's `Request` lists them: sorted, a string body's
        // content type unless one was given.
        if has_body && !headers.iter().any(|(k, _)| k == "content-type") {
            headers.push(("content-type".into(), "text/plain;charset=UTF-8".into()));
        }
        headers.sort();
        let block: String = headers.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();

        let href = self.url_href(u, e.start);
        let method_at = self.m.blob(method.as_bytes());
        let headers_at = self.m.blob(block.as_bytes());
        let (room, status) = (self.local(ValType::I32), self.local(ValType::I32));
        self.emit(I::I32Const(method_at as i32 + 4));
        self.emit(I::I32Const(method.len() as i32));
        self.emit(I::LocalGet(href));
        self.emit(I::I32Const(layout::SCRATCH as i32 + 8));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Const(headers_at as i32 + 4));
        self.emit(I::I32Const(block.len() as i32));
        if has_body {
            self.emit(I::LocalGet(body));
            self.emit(I::Call(ASCII_OUT));
            self.emit(I::LocalGet(body));
            self.emit(I::I32Load(mem(0, 2)));
        } else {
            self.emit(I::I32Const(0));
            self.emit(I::I32Const(0));
        }
        self.emit(I::I32Const(ANSWER_ROOM));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalTee(room));
        self.emit(I::I32Const(ANSWER_ROOM));
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::Call(HTTP_FETCH));
        self.emit(I::LocalTee(status));
        // A failure (denied, timed out, …): the isolate makes the call
        // again, is given the same answer, and throws as it does.
        self.emit(I::I32Const(0));
        self.emit(I::I32LtS);
        self.leave_if(left::HOST);
        // The isolate's `Response` takes 200–599 only.
        self.emit(I::LocalGet(status));
        self.emit(I::I32Const(200));
        self.emit(I::I32Sub);
        self.emit(I::I32Const(400));
        self.emit(I::I32GeU);
        self.leave_if(left::STATUS);
        self.take_answer(room);
        let r = self.local(ValType::I32);
        self.emit(I::I32Const(16));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalTee(r));
        self.emit(I::LocalGet(status));
        self.emit(I::I32Store(mem(answer::STATUS, 2)));
        self.emit(I::LocalGet(r));
        self.emit(I::LocalGet(room));
        self.emit(I::I32Store(mem(answer::BODY, 2)));
        self.emit(I::LocalGet(r));
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Store(mem(answer::LEN, 2)));
        self.emit(I::LocalGet(r));
        Ok(Ty::Fetched)
    }

    /// The href of string local `u` (`new URL(u).href`): a local holding
    /// its bytes, their length at `SCRATCH + 8`. A text that is no URL
    /// leaves at `at`, where the isolate throws its `TypeError`.
    fn url_href(&mut self, u: u32, at: u32) -> u32 {
        let (href, cap) = (self.local(ValType::I32), self.local(ValType::I32));
        self.emit(I::LocalGet(u));
        self.emit(I::Call(ASCII_OUT));
        self.emit(I::LocalGet(u));
        self.emit(I::I32Load(mem(0, 2)));
        // Room for every byte percent-encoded, and a path added.
        self.emit(I::LocalGet(u));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Const(3));
        self.emit(I::I32Mul);
        self.emit(I::I32Const(64));
        self.emit(I::I32Add);
        self.emit(I::LocalTee(cap));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalTee(href));
        self.emit(I::LocalGet(cap));
        self.emit(I::I32Const(layout::SCRATCH as i32 + 8));
        self.emit(I::Call(URL_HREF));
        self.leave_if(at);
        self.emit(I::I32Const(layout::SCRATCH as i32 + 8));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::LocalGet(cap));
        self.emit(I::I32GtU);
        self.leave_if(left::TEXT);
        href
    }

    /// After a host call wrote an answer into `room` (its full length at
    /// `SCRATCH`): one longer than the room leaves, its answer kept for
    /// the isolate; the room it did not use is given back.
    pub(super) fn take_answer(&mut self, room: u32) {
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Const(ANSWER_ROOM));
        self.emit(I::I32GtU);
        self.leave_if(left::TEXT);
        self.emit(I::LocalGet(room));
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Add);
        self.emit(I::Call(HEAP_SET));
    }

    /// `r.status` and `r.ok` of what `fetch` answered (on the stack).
    pub(super) fn fetched_field(&mut self, name: &str) -> R<Ty> {
        self.emit(I::I32Load(mem(answer::STATUS, 2)));
        match name {
            "status" => {
                self.emit(I::F64ConvertI32S);
                Ok(Ty::Num)
            }
            "ok" => {
                self.emit(I::I32Const(200));
                self.emit(I::I32Sub);
                self.emit(I::I32Const(100));
                self.emit(I::I32LtU);
                Ok(Ty::Bool)
            }
            _ => refuse(format!("the property `{name}` of a fetched response")),
        }
    }

    /// `await r.text()` (`e`) of what `fetch` answered (on the stack), or
    /// `r.json()` if `json`. A second read leaves: the isolate throws.
    pub(super) fn fetched_body(&mut self, e: &Expr, json: bool) -> R<Ty> {
        let r = self.local(ValType::I32);
        self.emit(I::LocalTee(r));
        self.emit(I::I32Load(mem(answer::READ, 2)));
        self.leave_if(e.start);
        self.emit(I::LocalGet(r));
        self.emit(I::I32Const(1));
        self.emit(I::I32Store(mem(answer::READ, 2)));
        self.emit(I::LocalGet(r));
        self.emit(I::I32Load(mem(answer::BODY, 2)));
        self.emit(I::LocalGet(r));
        self.emit(I::I32Load(mem(answer::LEN, 2)));
        self.emit(I::Call(ASCII_IN));
        if json {
            self.parse_json(e)
        } else {
            Ok(Ty::Str)
        }
    }

    /// `env.NAME` (`e`): the function's variable, which the trace saw as
    /// a string (a name the function lacks is `undefined`, refused).
    pub(super) fn env_var(&mut self, e: &Expr, name: &str) -> R<Ty> {
        let mask = e.id.map_or(0, |id| self.m.trace.mask(id));
        if mask & tag::KINDS != tag::STRING {
            return refuse(format!(
                "`env.{name}` that was not always a string (the function has no such variable?)"
            ));
        }
        let prefix = self.m.blob(format!("{name}=").as_bytes());
        self.emit(I::I32Const(prefix as i32));
        self.emit(I::Call(ENV_GET));
        self.leave_if_zero(e.start);
        Ok(Ty::Str)
    }
}
