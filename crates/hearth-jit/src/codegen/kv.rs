//! KV from compiled code: `await hearth.kv.get(key)` (alone, or before
//! `??`) and `await hearth.kv.set(key, value)`, through the wasm tier's
//! `hearth.kv_get` and `hearth.kv_set`, the same host calls the
//! isolate's `hearth.kv` makes, so a tape is the same whichever path ran.
//! A leave after one of them hands its answer to the isolate
//! (`HostCtx::fall_back`): the effect happens once.
//!
//! Keys and values are ASCII here; other text leaves (before the call for
//! what is sent, after it for what came back).

use wasm_encoder::{BlockType, Instruction as I, ValType};

use super::*;
use hearth_jit_runtime::left;

impl FnBuilder<'_, '_> {
    /// The key of `e` if it is `await hearth.kv.get(key)` (and `hearth`
    /// is the platform's).
    pub(super) fn kv_get_of<'e>(&self, e: &'e Expr) -> Option<&'e Expr> {
        let ExprKind::Await(inner) = &e.kind else {
            return None;
        };
        let ExprKind::Method(obj, name, args) = &inner.kind else {
            return None;
        };
        let ExprKind::Member(ns, kv) = &obj.kind else {
            return None;
        };
        match (kv.as_str(), name.as_str(), args.as_slice()) {
            ("kv", "get", [key]) if self.is_global(ns, "hearth") => Some(key),
            _ => None,
        }
    }

    /// `hearth.kv.get(key)`: pushes the value as a string, or 0 if there
    /// is none (JavaScript's `null`).
    pub(super) fn kv_get(&mut self, key: &Expr) -> R<()> {
        let (k, buf, code) = (
            self.local(ValType::I32),
            self.local(ValType::I32),
            self.local(ValType::I32),
        );
        self.string_of(key)?;
        self.emit(I::LocalTee(k));
        self.emit(I::Call(ASCII_OUT));
        self.emit(I::LocalGet(k));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Const(ANSWER_ROOM));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalTee(buf));
        self.emit(I::I32Const(ANSWER_ROOM));
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::Call(KV_GET));
        self.emit(I::LocalTee(code));
        // 0: found, its length at SCRATCH; 1: none; else the host failed
        // (the isolate makes the call again and meets the failure itself).
        self.emit(I::I32Eqz);
        self.emit(I::If(BlockType::Result(ValType::I32)));
        self.take_answer(buf);
        self.emit(I::LocalGet(buf));
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::Call(ASCII_IN));
        self.emit(I::Else);
        self.emit(I::LocalGet(code));
        self.emit(I::I32Const(1));
        self.emit(I::I32Ne);
        self.leave_if(left::HOST);
        self.emit(I::I32Const(0));
        self.emit(I::End);
        Ok(())
    }

    /// `hearth.kv.set(key, value)`, both as strings (`String(x)`, as the
    /// isolate sends them).
    pub(super) fn kv_set(&mut self, key: &Expr, value: &Expr) -> R<()> {
        let (k, v) = (self.local(ValType::I32), self.local(ValType::I32));
        self.string_of(key)?;
        self.emit(I::LocalSet(k));
        self.string_of(value)?;
        self.emit(I::LocalSet(v));
        for s in [k, v] {
            self.emit(I::LocalGet(s));
            self.emit(I::Call(ASCII_OUT));
            self.emit(I::LocalGet(s));
            self.emit(I::I32Load(mem(0, 2)));
        }
        self.emit(I::Call(KV_SET));
        self.leave_if(left::HOST);
        Ok(())
    }

    /// `a ?? b`: for a KV read, `b` where there was no value; otherwise `a`
    /// must be a value the trace never saw `null` or `undefined` as.
    pub(super) fn coalesce(&mut self, a: &Expr, b: &Expr) -> R<Ty> {
        if let Some(id) = a.id
            && self.m.trace.mask(id) == 0
        {
            return Err(Stop::Unreached(a.start));
        }
        let Some(key) = self.kv_get_of(a) else {
            let mask = a.id.map_or(0, |id| self.m.trace.mask(id));
            if mask & (tag::NULL | tag::UNDEFINED) != 0 {
                return refuse("`??` of a value other than a KV read that was null");
            }
            return self.expr(a);
        };
        let v = self.local(ValType::I32);
        self.kv_get(key)?;
        self.emit(I::LocalTee(v));
        self.emit(I::I32Eqz);
        self.emit(I::If(BlockType::Result(ValType::I32)));
        match self.expr_or_leave(b)? {
            Some(Ty::Str) | None => {}
            Some(t) => {
                return refuse(format!(
                    "`hearth.kv.get(…) ?? x` with x a {t:?} (a string is needed)"
                ));
            }
        }
        self.emit(I::Else);
        self.emit(I::LocalGet(v));
        self.emit(I::End);
        Ok(Ty::Str)
    }
}
