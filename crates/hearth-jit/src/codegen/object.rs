//! Plain objects: a literal's keys are its shape, known when compiling,
//! so an object is its fields laid out in order, 8 bytes each (a number,
//! or an `i32` for anything else), and `o.key` is a load at a constant
//! offset. The shape never changes: a property the literal did not have
//! is refused, as is a store of another kind of value.

use std::rc::Rc;

use wasm_encoder::{Instruction as I, ValType};

use super::*;

/// Where a store goes; its address is on the stack.
pub(super) enum Slot {
    /// An element of a typed array or an array of this type.
    Element(Ty),
    /// A field holding this type.
    Field(Ty),
}

impl Slot {
    /// The kind of value the slot holds (as a value: typed arrays' elements
    /// are numbers).
    pub(super) fn value(&self) -> Ty {
        match self {
            Slot::Element(t) => FnBuilder::element_value(t),
            Slot::Field(t) => t.clone(),
        }
    }
}

/// The offset of field `k`.
fn offset(k: usize) -> u64 {
    8 * k as u64
}

impl FnBuilder<'_, '_> {
    /// `{ key: value, … }`: the values in order, then the object.
    pub(super) fn object(&mut self, props: &[(String, Expr)]) -> R<Ty> {
        let mut fields = Vec::with_capacity(props.len());
        let mut vals = Vec::with_capacity(props.len());
        for (key, value) in props {
            let t = self.expr(value)?;
            let Some(v) = t.val() else {
                return refuse(format!("the field `{key}` holding a {t:?}"));
            };
            let l = self.local(v);
            self.emit(I::LocalSet(l));
            vals.push(l);
            fields.push((key.clone(), t));
        }
        let o = self.local(ValType::I32);
        self.emit(I::I32Const((8 * props.len().max(1)) as i32));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalSet(o));
        for (k, (l, (_, t))) in vals.iter().zip(&fields).enumerate() {
            self.emit(I::LocalGet(o));
            self.emit(I::LocalGet(*l));
            self.store_at(t, offset(k));
        }
        self.emit(I::LocalGet(o));
        Ok(Ty::Obj(Rc::new(fields)))
    }

    /// The field `name` of shape `t`: its index and type, or why not.
    fn field_of(t: &Ty, name: &str) -> R<(usize, Ty)> {
        let Ty::Obj(fields) = t else {
            return refuse(format!("the property `{name}` of a {t:?}"));
        };
        match fields.iter().position(|(k, _)| k == name) {
            Some(k) => Ok((k, fields[k].1.clone())),
            None => refuse(format!(
                "the property `{name}` of an object made without it"
            )),
        }
    }

    /// `o.name` of the object on the stack, as its value.
    pub(super) fn load_field(&mut self, t: &Ty, name: &str) -> R<Ty> {
        let (k, ft) = Self::field_of(t, name)?;
        self.load_at(&ft, offset(k));
        Ok(ft)
    }

    /// For an assignment to `target` (an element or a field): evaluates
    /// the object (and index), and leaves the slot's address on the stack.
    pub(super) fn place(&mut self, target: &Target) -> R<Slot> {
        match target {
            Target::Index(obj, idx) => match self.element(obj, idx)? {
                Ty::DynArr => refuse("a store into a parsed JSON array"),
                t => Ok(Slot::Element(t)),
            },
            Target::Member(obj, name) => {
                let t = self.expr(obj)?;
                if t == Ty::DynObj {
                    return refuse("a store into a parsed JSON object");
                }
                let (k, ft) = Self::field_of(&t, name)?;
                if k > 0 {
                    self.emit(I::I32Const(offset(k) as i32));
                    self.emit(I::I32Add);
                }
                Ok(Slot::Field(ft))
            }
            Target::Var(_) => unreachable!("a variable is not a slot in memory"),
        }
    }

    pub(super) fn load_slot(&mut self, slot: &Slot) -> Ty {
        match slot {
            Slot::Element(t) => self.load_element(t),
            Slot::Field(t) => {
                self.load(t);
                t.clone()
            }
        }
    }

    pub(super) fn store_slot(&mut self, slot: &Slot) {
        match slot {
            Slot::Element(t) => self.store_element(t),
            Slot::Field(t) => self.store_at(t, 0),
        }
    }

    /// Stores the value on the stack, of type `t`, at the address below
    /// it plus `offset`.
    pub(super) fn store_at(&mut self, t: &Ty, offset: u64) {
        match t.val() {
            Some(ValType::F64) => self.emit(I::F64Store(mem(offset, 3))),
            _ => self.emit(I::I32Store(mem(offset, 2))),
        }
    }
}
