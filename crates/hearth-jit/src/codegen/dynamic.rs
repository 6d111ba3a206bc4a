//! Values `JSON.parse` made (the runtime's `json_parse`): their shape is only
//! known when the request comes, so each read is typed by what the trace
//! saw there and guarded. `body.n` looks the key up and, where the trace
//! saw only numbers, reads a number or leaves; an object or array read
//! from one is kept as the parser's block, to read from in turn. Parsed
//! values are read, never written.

use wasm_encoder::{Instruction as I, ValType};

use super::*;
use hearth_jit_runtime::json::cell;

impl FnBuilder<'_, '_> {
    /// `JSON.parse(text)` (`e`), of the string on the stack.
    pub(super) fn parse_json(&mut self, e: &Expr) -> R<Ty> {
        self.emit(I::Call(JSON_PARSE));
        self.unbox(e)
    }

    /// `o.name` (`e`) of a parsed object on the stack.
    pub(super) fn parsed_field(&mut self, e: &Expr, name: &str) -> R<Ty> {
        let key = self.m.str_addr(name);
        self.emit(I::I32Const(key));
        self.emit(I::Call(JSON_GET));
        self.unbox(e)
    }

    /// The cell on the stack (0 for a key the object lacks) as the one
    /// kind of value the trace saw at `e`; any other leaves there.
    pub(super) fn unbox(&mut self, e: &Expr) -> R<Ty> {
        let mask = e.id.map_or(0, |id| self.m.trace.mask(id)) & tag::KINDS;
        if mask == 0 {
            return Err(Stop::Unreached(e.start));
        }
        let (first, last, t) = match mask {
            m if m & !tag::NUMBER == 0 => (cell::NUMBER, cell::NUMBER, Ty::Num),
            m if m & !tag::BOOLEAN == 0 => (cell::FALSE, cell::TRUE, Ty::Bool),
            tag::STRING => (cell::STRING, cell::STRING, Ty::Str),
            tag::ARRAY => (cell::ARRAY, cell::ARRAY, Ty::DynArr),
            tag::OBJECT => (cell::OBJECT, cell::OBJECT, Ty::DynObj),
            _ => {
                return refuse(format!(
                    "a JSON value that was null, missing or of more than one kind, at offset {}",
                    e.start
                ));
            }
        };
        self.leave_if_zero(e.start);
        let c = self.local(ValType::I32);
        self.emit(I::LocalTee(c));
        // tag - first > last - first, unsigned: another kind.
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Const(first));
        self.emit(I::I32Sub);
        self.emit(I::I32Const(last - first));
        self.emit(I::I32GtU);
        self.leave_if(e.start);
        self.emit(I::LocalGet(c));
        match t {
            Ty::Num => self.emit(I::F64Load(mem(cell::NUM, 3))),
            Ty::Bool => {
                self.emit(I::I32Load(mem(0, 2)));
                self.emit(I::I32Const(cell::TRUE));
                self.emit(I::I32Eq);
            }
            _ => self.emit(I::I32Load(mem(cell::PTR, 2))),
        }
        Ok(t)
    }
}
