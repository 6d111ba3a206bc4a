//! Expressions, and the memory they read and write: what [`FnBuilder`]
//! emits for each kind of [`ExprKind`], typed by the trace, with the
//! guards that leave where the trace did not go.

use wasm_encoder::{BlockType, Instruction as I, ValType};

use super::*;

impl FnBuilder<'_, '_> {
    /// JavaScript's ToInt32 of the number on the stack: inline when it is
    /// an int32 already (loop counters, indexes), else by the helper.
    pub(super) fn int32(&mut self) {
        let (x, i) = (self.local(ValType::F64), self.local(ValType::I32));
        self.emit(I::LocalTee(x));
        self.emit(I::I32TruncSatF64S);
        self.emit(I::LocalTee(i));
        self.emit(I::F64ConvertI32S);
        self.emit(I::LocalGet(x));
        self.emit(I::F64Eq);
        self.emit(I::If(BlockType::Result(ValType::I32)));
        self.emit(I::LocalGet(i));
        self.emit(I::Else);
        self.emit(I::LocalGet(x));
        self.emit(I::Call(TO_INT32));
        self.emit(I::End);
    }

    /// JavaScript's `%` of the two numbers on the stack: `i32.rem_s` when
    /// both are int32s and the divisor is not 0 (the result takes the
    /// dividend's sign, so `-4 % 2` is `-0`), else by the helper.
    pub(super) fn rem(&mut self) {
        let (a, b) = (self.local(ValType::F64), self.local(ValType::F64));
        let (ia, ib) = (self.local(ValType::I32), self.local(ValType::I32));
        self.emit(I::LocalSet(b));
        self.emit(I::LocalSet(a));
        for (x, i) in [(a, ia), (b, ib)] {
            self.emit(I::LocalGet(x));
            self.emit(I::I32TruncSatF64S);
            self.emit(I::LocalTee(i));
            self.emit(I::F64ConvertI32S);
            self.emit(I::LocalGet(x));
            self.emit(I::F64Eq);
        }
        self.emit(I::I32And);
        self.emit(I::LocalGet(ib));
        self.emit(I::I32Const(0));
        self.emit(I::I32Ne);
        self.emit(I::I32And);
        self.emit(I::If(BlockType::Result(ValType::F64)));
        self.emit(I::LocalGet(ia));
        self.emit(I::LocalGet(ib));
        self.emit(I::I32RemS);
        self.emit(I::F64ConvertI32S);
        self.emit(I::LocalGet(a));
        self.emit(I::F64Copysign);
        self.emit(I::Else);
        self.emit(I::LocalGet(a));
        self.emit(I::LocalGet(b));
        self.emit(I::Call(REM));
        self.emit(I::End);
    }

    /// Pushes WASI clock `id`'s time in nanoseconds (an `i64`).
    pub(super) fn clock(&mut self, id: i32) {
        // The host's clocks do not fail; if one did, the time would be 0,
        // as the isolate has it without a host.
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::I64Const(0));
        self.emit(I::I64Store(mem(0, 3)));
        self.emit(I::I32Const(id));
        self.emit(I::I64Const(1));
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::Call(CLOCK_TIME_GET));
        self.emit(I::Drop);
        self.emit(I::I32Const(layout::SCRATCH as i32));
        self.emit(I::I64Load(mem(0, 3)));
    }

    // ---- memory ----

    /// Pushes the address of `arr[i]` (locals), an array of `elem`s.
    pub(super) fn arr_elem_addr(&mut self, arr: u32, i: u32, elem: &Ty) {
        self.emit(I::LocalGet(arr));
        self.emit(I::I32Load(mem(layout::ARR_DATA, 2)));
        self.emit(I::LocalGet(i));
        self.emit(I::I32Const(elem_bytes(elem) as i32));
        self.emit(I::I32Mul);
        self.emit(I::I32Add);
    }

    pub(super) fn load(&mut self, elem: &Ty) {
        self.load_at(elem, 0)
    }

    pub(super) fn load_at(&mut self, elem: &Ty, offset: u64) {
        match elem.val() {
            Some(ValType::F64) => self.emit(I::F64Load(mem(offset, 3))),
            _ => self.emit(I::I32Load(mem(offset, 2))),
        }
    }

    /// Pops an index (a number) and pushes it as an `i32` known to be an
    /// integer below the length at `len_of` (the address of a `[len, …]`
    /// block), or leaves.
    pub(super) fn checked_index(&mut self, obj: u32, at: u32) {
        let x = self.local(ValType::F64);
        let i = self.local(ValType::I32);
        self.emit(I::LocalTee(x));
        self.emit(I::I32TruncSatF64U);
        self.emit(I::LocalTee(i));
        self.emit(I::F64ConvertI32U);
        self.emit(I::LocalGet(x));
        self.emit(I::F64Ne);
        self.emit(I::LocalGet(i));
        self.emit(I::LocalGet(obj));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32GeU);
        self.emit(I::I32Or);
        self.leave_if(at);
        self.emit(I::LocalGet(i));
    }

    /// For `obj[idx]` (typed array or array): evaluates both, checks the
    /// index, and leaves the element's address on the stack. Returns the
    /// object's type.
    pub(super) fn element(&mut self, obj: &Expr, idx: &Expr) -> R<Ty> {
        let t = self.expr(obj)?;
        if !matches!(t, Ty::U8 | Ty::I32A | Ty::F64A | Ty::Arr(_) | Ty::DynArr) {
            return refuse(format!("indexing a {t:?}"));
        }
        let o = self.local(ValType::I32);
        self.emit(I::LocalSet(o));
        self.num(idx)?;
        self.checked_index(o, idx.start);
        let size = t.elem_size();
        if size > 1 {
            self.emit(I::I32Const(size as i32));
            self.emit(I::I32Mul);
        }
        self.emit(I::LocalGet(o));
        if let Ty::Arr(_) | Ty::DynArr = t {
            self.emit(I::I32Load(mem(layout::ARR_DATA, 2)));
        } else {
            self.emit(I::I32Const(layout::TYPED_DATA as i32));
            self.emit(I::I32Add);
        }
        self.emit(I::I32Add);
        Ok(t)
    }

    /// Loads an element of `t` at the address on the stack, as its value.
    pub(super) fn load_element(&mut self, t: &Ty) -> Ty {
        match t {
            Ty::U8 => {
                self.emit(I::I32Load8U(mem(0, 0)));
                self.emit(I::F64ConvertI32U);
                Ty::Num
            }
            Ty::I32A => {
                self.emit(I::I32Load(mem(0, 2)));
                self.emit(I::F64ConvertI32S);
                Ty::Num
            }
            Ty::F64A => {
                self.emit(I::F64Load(mem(0, 3)));
                Ty::Num
            }
            Ty::Arr(e) => {
                self.load(e);
                (**e).clone()
            }
            _ => Ty::Undef,
        }
    }

    /// Stores the value on the stack (of the element type, as a number
    /// for typed arrays) at the address below it.
    pub(super) fn store_element(&mut self, t: &Ty) {
        match t {
            Ty::U8 => {
                self.int32();
                self.emit(I::I32Store8(mem(0, 0)));
            }
            Ty::I32A => {
                self.int32();
                self.emit(I::I32Store(mem(0, 2)));
            }
            Ty::F64A => self.emit(I::F64Store(mem(0, 3))),
            Ty::Arr(e) => self.store_at(e, 0),
            _ => {}
        }
    }

    /// The element type a value stored into `t` must have.
    pub(super) fn element_value(t: &Ty) -> Ty {
        match t {
            Ty::Arr(e) => (**e).clone(),
            _ => Ty::Num,
        }
    }

    // ---- expressions ----

    /// Pushes `e`'s truthiness as an `i32`.
    pub(super) fn test(&mut self, e: &Expr) -> R<()> {
        if let Some(id) = e.id
            && self.m.trace.mask(id) == 0
        {
            return Err(Stop::Unreached(e.start));
        }
        match &e.kind {
            ExprKind::Logic(and, a, b) => {
                self.test(a)?;
                self.emit(I::If(BlockType::Result(ValType::I32)));
                if *and {
                    self.test_or_leave(b)?;
                    self.emit(I::Else);
                    self.emit(I::I32Const(0));
                } else {
                    self.emit(I::I32Const(1));
                    self.emit(I::Else);
                    self.test_or_leave(b)?;
                }
                self.emit(I::End);
            }
            ExprKind::Unary(UnOp::Not, a) => {
                self.test(a)?;
                self.emit(I::I32Eqz);
            }
            _ => {
                let t = self.expr(e)?;
                self.truthy(&t);
            }
        }
        Ok(())
    }

    /// [`test`](Self::test) for an operand that is evaluated only
    /// sometimes: unreached, it leaves where it is.
    pub(super) fn test_or_leave(&mut self, e: &Expr) -> R<()> {
        let depth = self.depth;
        match self.test(e) {
            Err(Stop::Unreached(at)) => {
                self.abandon(depth, at);
                Ok(())
            }
            other => other,
        }
    }

    pub(super) fn truthy(&mut self, t: &Ty) {
        match t {
            Ty::Bool => {}
            Ty::Num => {
                self.emit(I::F64Abs);
                self.emit(I::F64Const(0.0.into()));
                self.emit(I::F64Gt);
            }
            Ty::Str => {
                self.emit(I::I32Load(mem(0, 2)));
                self.emit(I::I32Const(0));
                self.emit(I::I32Ne);
            }
            Ty::Undef => self.emit(I::I32Const(0)),
            t if t.is_namespace() => self.emit(I::I32Const(1)),
            _ => {
                self.emit(I::Drop);
                self.emit(I::I32Const(1));
            }
        }
    }

    /// `e`, which must be a number.
    pub(super) fn num(&mut self, e: &Expr) -> R<()> {
        match self.expr(e)? {
            Ty::Num => Ok(()),
            t => refuse(format!(
                "a {t:?} where a number is needed, at offset {}",
                e.start
            )),
        }
    }

    /// `e` converted to a string (`String(e)`, template parts, `+`).
    pub(super) fn string_of(&mut self, e: &Expr) -> R<()> {
        let t = self.expr(e)?;
        self.stringify(&t)
    }

    pub(super) fn stringify(&mut self, t: &Ty) -> R<()> {
        match t {
            Ty::Str => {}
            Ty::Num => self.emit(I::Call(NUM_TO_STR)),
            Ty::Bool => {
                let (yes, no) = (self.m.str_addr("true"), self.m.str_addr("false"));
                let b = self.local(ValType::I32);
                self.emit(I::LocalSet(b));
                self.emit(I::I32Const(yes));
                self.emit(I::I32Const(no));
                self.emit(I::LocalGet(b));
                self.emit(I::Select);
            }
            t => return refuse(format!("a {t:?} turned into a string")),
        }
        Ok(())
    }

    /// Evaluates `e` for a branch that runs only sometimes (`?:`, `&&`,
    /// `||`): unreached, it leaves, typed as `like`.
    pub(super) fn expr_or_leave(&mut self, e: &Expr) -> R<Option<Ty>> {
        let depth = self.depth;
        match self.expr(e) {
            Err(Stop::Unreached(at)) => {
                self.abandon(depth, at);
                Ok(None)
            }
            Ok(t) => Ok(Some(t)),
            Err(e) => Err(e),
        }
    }

    pub(super) fn expr(&mut self, e: &Expr) -> R<Ty> {
        if let Some(id) = e.id
            && self.m.trace.mask(id) == 0
        {
            return Err(Stop::Unreached(e.start));
        }
        Ok(match &e.kind {
            ExprKind::Num(n) => {
                self.emit(I::F64Const((*n).into()));
                Ty::Num
            }
            ExprKind::Str(s) => {
                let at = self.m.string(s);
                self.emit(I::I32Const(at as i32));
                Ty::Str
            }
            ExprKind::Bool(b) => {
                self.emit(I::I32Const(*b as i32));
                Ty::Bool
            }
            ExprKind::Var(name) => self.var(name)?,
            ExprKind::Template(quasis, exprs) => {
                let first = self.m.string(&quasis[0]);
                self.emit(I::I32Const(first as i32));
                for (q, x) in quasis[1..].iter().zip(exprs) {
                    self.string_of(x)?;
                    self.emit(I::Call(CONCAT));
                    if !q.is_empty() {
                        let at = self.m.string(q);
                        self.emit(I::I32Const(at as i32));
                        self.emit(I::Call(CONCAT));
                    }
                }
                Ty::Str
            }
            ExprKind::Bin(op, a, b) => self.binary(*op, a, b)?,
            ExprKind::Logic(and, a, b) => {
                let t = self.expr(a)?;
                let v = self.local(
                    t.val()
                        .ok_or_else(|| Refused::new("`&&`/`||` of a non-value".into()))?,
                );
                self.emit(I::LocalTee(v));
                self.truthy(&t);
                if !*and {
                    self.emit(I::I32Eqz);
                }
                self.emit(I::If(BlockType::Result(t.val().expect("checked above"))));
                if let Some(tb) = self.expr_or_leave(b)?
                    && tb != t
                {
                    return refuse("`&&`/`||` of two kinds of value");
                }
                self.emit(I::Else);
                self.emit(I::LocalGet(v));
                self.emit(I::End);
                t
            }
            ExprKind::Unary(op, a) => match op {
                UnOp::Neg => {
                    self.num(a)?;
                    self.emit(I::F64Neg);
                    Ty::Num
                }
                UnOp::Plus => {
                    self.num(a)?;
                    Ty::Num
                }
                UnOp::Not => {
                    self.test(a)?;
                    self.emit(I::I32Eqz);
                    Ty::Bool
                }
                UnOp::BitNot => {
                    self.num(a)?;
                    self.int32();
                    self.emit(I::I32Const(-1));
                    self.emit(I::I32Xor);
                    self.emit(I::F64ConvertI32S);
                    Ty::Num
                }
            },
            ExprKind::Update {
                increment,
                prefix,
                target,
            } => self.update(*increment, *prefix, target)?,
            ExprKind::Assign { op, target, value } => self.assign(*op, target, value)?,
            ExprKind::Cond(t, a, b) => {
                self.test(t)?;
                // The result type comes from whichever side the trace saw.
                let ty = [a, b]
                    .iter()
                    .find_map(|x| {
                        x.id.map(|id| self.m.trace.mask(id))
                            .filter(|m| *m != 0)
                            .and_then(Ty::of_mask)
                            .or_else(|| Ty::of_mask(literal_mask(x)))
                    })
                    .ok_or_else(|| {
                        Refused::new("`?:` whose result kind the trace does not tell".into())
                    })?;
                let v = ty
                    .val()
                    .ok_or_else(|| Refused::new("`?:` of a non-value".into()))?;
                self.emit(I::If(BlockType::Result(v)));
                for (k, side) in [a, b].into_iter().enumerate() {
                    if k == 1 {
                        self.emit(I::Else);
                    }
                    if let Some(t) = self.expr_or_leave(side)?
                        && t != ty
                    {
                        return refuse("`?:` of two kinds of value");
                    }
                }
                self.emit(I::End);
                ty
            }
            ExprKind::Call(name, args) => self.call(name, args)?,
            ExprKind::New(class, args) => self.new_(class, args)?,
            ExprKind::Method(obj, name, args) if name == "parse" && self.is_global(obj, "JSON") => {
                let [text] = args.as_slice() else {
                    return refuse("JSON.parse with other than one argument");
                };
                if self.expr(text)? != Ty::Str {
                    return refuse("JSON.parse of something other than a string");
                }
                self.parse_json(e)?
            }
            ExprKind::Method(obj, name, args) => self.method(obj, name, args)?,
            ExprKind::Member(obj, name) => self.member(e, obj, name)?,
            ExprKind::Index(obj, idx) => {
                let t = self.element(obj, idx)?;
                if t == Ty::DynArr {
                    self.emit(I::I32Load(mem(0, 2)));
                    self.unbox(e)?
                } else {
                    self.load_element(&t)
                }
            }
            ExprKind::Array(elems) => self.array(elems)?,
            ExprKind::Object(props) => self.object(props)?,
            ExprKind::Arrow(_) => return refuse("a function used as a value"),
            ExprKind::Coalesce(a, b) => self.coalesce(a, b)?,
            ExprKind::Await(inner) => {
                if let Some(args) = self.fetch_of(inner) {
                    if let Some(id) = inner.id
                        && self.m.trace.mask(id) == 0
                    {
                        return Err(Stop::Unreached(inner.start));
                    }
                    return self.fetch(e, args);
                }
                let ExprKind::Method(obj, name, args) = &inner.kind else {
                    return refuse("`await` of something other than a method call");
                };
                if let Some(id) = inner.id
                    && self.m.trace.mask(id) == 0
                {
                    return Err(Stop::Unreached(inner.start));
                }
                match (self.expr(obj)?, name.as_str(), args.as_slice()) {
                    (Ty::Request, "text", []) => {
                        self.emit(I::Drop);
                        self.emit(I::Call(READ_BODY));
                        Ty::Str
                    }
                    (Ty::Request, "json", []) => {
                        self.emit(I::Drop);
                        self.emit(I::Call(READ_BODY));
                        self.parse_json(e)?
                    }
                    (Ty::Kv, "get", [key]) => {
                        if e.id
                            .is_some_and(|id| self.m.trace.mask(id) & tag::NULL != 0)
                        {
                            return refuse(
                                "`await hearth.kv.get(…)` that was null, other than before `??`",
                            );
                        }
                        // The trace saw only strings: a missing value leaves.
                        self.kv_get(key)?;
                        self.leave_if_zero(e.start);
                        Ty::Str
                    }
                    (Ty::Fetched, "text", []) => self.fetched_body(e, false)?,
                    (Ty::Fetched, "json", []) => self.fetched_body(e, true)?,
                    (Ty::Kv, "set", [key, value]) => {
                        self.kv_set(key, value)?;
                        Ty::Undef
                    }
                    (t, _, _) => {
                        return refuse(format!(
                            "`await` of the method `{name}` of a {t:?} with {} arguments",
                            args.len()
                        ));
                    }
                }
            }
        })
    }

    /// Whether `e` names the platform's global `name` (not a variable of
    /// the function's).
    pub(super) fn is_global(&self, e: &Expr, name: &str) -> bool {
        matches!(&e.kind, ExprKind::Var(v) if v == name) && self.lookup(name).is_none()
    }

    pub(super) fn var(&mut self, name: &str) -> R<Ty> {
        match self.lookup(name) {
            Some((Binding::Local(l, t), false)) => {
                self.emit(I::LocalGet(l));
                Ok(t)
            }
            Some((b @ Binding::Int(..), false)) => {
                self.get(&b);
                Ok(Ty::Num)
            }
            Some((Binding::Local(..) | Binding::Int(..), true)) => refuse(format!(
                "a function nested in a function it reads `{name}` of"
            )),
            Some((Binding::Global(g, t), _)) => {
                self.emit(I::GlobalGet(g));
                Ok(t)
            }
            Some((Binding::Const(i), _)) => {
                let value = &self.m.program.consts[i].1;
                self.expr(value)
            }
            Some((Binding::Func(_), _)) => refuse(format!("the function `{name}` used as a value")),
            Some((Binding::Env, _)) => Ok(Ty::Env),
            None => match name {
                "Math" => Ok(Ty::Math),
                "String" => Ok(Ty::StringCtor),
                "Date" => Ok(Ty::DateCtor),
                "performance" => Ok(Ty::Performance),
                "JSON" => Ok(Ty::Json),
                "hearth" => Ok(Ty::Hearth),
                "process" => Ok(Ty::Process),
                "Response" => Ok(Ty::ResponseCtor),
                "NaN" => {
                    self.emit(I::F64Const(f64::NAN.into()));
                    Ok(Ty::Num)
                }
                "Infinity" => {
                    self.emit(I::F64Const(f64::INFINITY.into()));
                    Ok(Ty::Num)
                }
                _ => refuse(format!("the name `{name}`")),
            },
        }
    }

    pub(super) fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr) -> R<Ty> {
        use BinOp::*;
        if let (Some(ia), Some(ib)) = (self.int_var(a), self.int_var(b))
            && op == Rem
        {
            self.int_rem(ia, ib);
            return Ok(Ty::Num);
        }
        if self.int_shaped(a) && self.int_shaped(b) {
            let compare = match op {
                Lt => Some(I::I32LtS),
                Le => Some(I::I32LeS),
                Gt => Some(I::I32GtS),
                Ge => Some(I::I32GeS),
                _ => None,
            };
            if let Some(compare) = compare {
                self.int_expr(a);
                self.int_expr(b);
                self.emit(compare);
                return Ok(Ty::Bool);
            }
        }
        let ta = self.expr(a)?;
        if op == Add && ta == Ty::Str {
            self.string_of(b)?;
            self.emit(I::Call(CONCAT));
            return Ok(Ty::Str);
        }
        if op == Add && ta == Ty::Num && matches!(b.kind, ExprKind::Str(_) | ExprKind::Template(..))
        {
            self.emit(I::Call(NUM_TO_STR));
            self.string_of(b)?;
            self.emit(I::Call(CONCAT));
            return Ok(Ty::Str);
        }
        let tb = self.expr(b)?;
        if op == Add && tb == Ty::Str {
            // `number + string`: the number, as a string, first.
            let r = self.local(ValType::I32);
            self.emit(I::LocalSet(r));
            self.stringify(&ta)?;
            self.emit(I::LocalGet(r));
            self.emit(I::Call(CONCAT));
            return Ok(Ty::Str);
        }
        if matches!(op, StrictEq | StrictNe | Eq | Ne) {
            if let (Ty::Obj(_), Ty::Obj(_)) = (&ta, &tb)
                && ta != tb
            {
                // Objects of two shapes are two objects: never equal.
                self.emit(I::Drop);
                self.emit(I::Drop);
                self.emit(I::I32Const(matches!(op, StrictNe | Ne) as i32));
                return Ok(Ty::Bool);
            }
            if ta != tb {
                return refuse(format!("comparing a {ta:?} with a {tb:?}"));
            }
            match ta {
                Ty::Num => self.emit(I::F64Eq),
                Ty::Bool => self.emit(I::I32Eq),
                Ty::Str => self.emit(I::Call(STR_EQ)),
                // Objects and arrays are equal only to themselves.
                Ty::Obj(_) | Ty::Arr(_) => self.emit(I::I32Eq),
                t => return refuse(format!("comparing {t:?}s")),
            }
            if matches!(op, StrictNe | Ne) {
                self.emit(I::I32Eqz);
            }
            return Ok(Ty::Bool);
        }
        if ta != Ty::Num || tb != Ty::Num {
            return refuse(format!("{op:?} of a {ta:?} and a {tb:?}"));
        }
        self.num_op(op);
        Ok(match op {
            Lt | Le | Gt | Ge => Ty::Bool,
            _ => Ty::Num,
        })
    }

    /// Applies `op` to the two numbers on the stack.
    pub(super) fn num_op(&mut self, op: BinOp) {
        use BinOp::*;
        match op {
            Add => self.emit(I::F64Add),
            Sub => self.emit(I::F64Sub),
            Mul => self.emit(I::F64Mul),
            Div => self.emit(I::F64Div),
            Rem => self.rem(),
            Lt => self.emit(I::F64Lt),
            Le => self.emit(I::F64Le),
            Gt => self.emit(I::F64Gt),
            Ge => self.emit(I::F64Ge),
            BitAnd | BitOr | BitXor | Shl | Shr | UShr => {
                let r = self.local(ValType::I32);
                self.int32();
                self.emit(I::LocalSet(r));
                self.int32();
                self.emit(I::LocalGet(r));
                match op {
                    BitAnd => self.emit(I::I32And),
                    BitOr => self.emit(I::I32Or),
                    BitXor => self.emit(I::I32Xor),
                    Shl => self.emit(I::I32Shl),
                    Shr => self.emit(I::I32ShrS),
                    _ => self.emit(I::I32ShrU),
                }
                if op == UShr {
                    self.emit(I::F64ConvertI32U);
                } else {
                    self.emit(I::F64ConvertI32S);
                }
            }
            StrictEq | StrictNe | Eq | Ne => unreachable!("compared in binary()"),
        }
    }

    pub(super) fn update(&mut self, increment: bool, prefix: bool, target: &Target) -> R<Ty> {
        let delta = |fb: &mut Self| {
            fb.emit(I::F64Const(1.0.into()));
            fb.emit(if increment { I::F64Add } else { I::F64Sub });
        };
        match target {
            Target::Var(name) => {
                let (b, t) = self.assignable(name)?;
                if let Binding::Int(l, at) = b {
                    self.int_update(l, at, increment, prefix);
                    return Ok(Ty::Num);
                }
                if t != Ty::Num {
                    return refuse(format!("`++`/`--` of a {t:?}"));
                }
                let old = self.local(ValType::F64);
                self.get(&b);
                self.emit(I::LocalTee(old));
                delta(self);
                self.set(&b);
                if prefix {
                    self.get(&b);
                } else {
                    self.emit(I::LocalGet(old));
                }
            }
            Target::Index(..) | Target::Member(..) => {
                let slot = self.place(target)?;
                if slot.value() != Ty::Num {
                    return refuse("`++`/`--` of a non-number element or field");
                }
                let addr = self.local(ValType::I32);
                let old = self.local(ValType::F64);
                self.emit(I::LocalTee(addr));
                self.emit(I::LocalGet(addr));
                self.load_slot(&slot);
                self.emit(I::LocalTee(old));
                delta(self);
                self.store_slot(&slot);
                // What a typed array holds after the store is what the
                // expression is worth in JavaScript only for prefix forms
                // of an in-range value; read it back.
                if prefix {
                    self.emit(I::LocalGet(addr));
                    self.load_slot(&slot);
                } else {
                    self.emit(I::LocalGet(old));
                }
            }
        }
        Ok(Ty::Num)
    }

    /// `a % b` of two int32 variables: `i32.rem_s`, the result taking the
    /// dividend's sign (`-4 % 2` is `-0`); by 0, the helper (NaN).
    fn int_rem(&mut self, a: u32, b: u32) {
        self.emit(I::LocalGet(b));
        self.emit(I::I32Eqz);
        self.emit(I::If(BlockType::Result(ValType::F64)));
        self.emit(I::LocalGet(a));
        self.emit(I::F64ConvertI32S);
        self.emit(I::LocalGet(b));
        self.emit(I::F64ConvertI32S);
        self.emit(I::Call(REM));
        self.emit(I::Else);
        self.emit(I::LocalGet(a));
        self.emit(I::LocalGet(b));
        self.emit(I::I32RemS);
        self.emit(I::F64ConvertI32S);
        self.emit(I::LocalGet(a));
        self.emit(I::F64ConvertI32S);
        self.emit(I::F64Copysign);
        self.emit(I::End);
    }

    /// `++`/`--` of an int32 variable in its `i32`: leaves where it would
    /// pass the int32 range.
    fn int_update(&mut self, l: u32, at: u32, increment: bool, prefix: bool) {
        let old = self.local(ValType::I32);
        self.emit(I::LocalGet(l));
        self.emit(I::LocalTee(old));
        self.emit(I::I32Const(if increment { i32::MAX } else { i32::MIN }));
        self.emit(I::I32Eq);
        self.leave_if(at);
        self.emit(I::LocalGet(old));
        self.emit(I::I32Const(1));
        self.emit(if increment { I::I32Add } else { I::I32Sub });
        self.emit(I::LocalSet(l));
        self.emit(I::LocalGet(if prefix { l } else { old }));
        self.emit(I::F64ConvertI32S);
    }

    /// Whether `e` can be computed in `i32`s ([`int_expr`](Self::int_expr)):
    /// an int32 literal, a variable kept as an int32, or `+`, `-`, `*` of
    /// those that the trace saw give only int32s.
    pub(super) fn int_shaped(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Num(x) => int32_literal(*x),
            ExprKind::Unary(UnOp::Neg, x) => {
                matches!(x.kind, ExprKind::Num(v) if v != 0.0 && int32_literal(-v))
            }
            ExprKind::Var(_) => self.int_var(e).is_some() || self.int_const(e).is_some(),
            ExprKind::Bin(BinOp::Add | BinOp::Sub | BinOp::Mul, a, b) => {
                e.id.is_some_and(|id| self.m.trace.mask(id) & tag::KINDS == tag::INT)
                    && self.int_shaped(a)
                    && self.int_shaped(b)
            }
            _ => false,
        }
    }

    /// Pushes `e`, [`int_shaped`](Self::int_shaped), as an `i32`: its
    /// arithmetic in `i64`, leaving where a result is past the int32
    /// range, or is -0 (a product of 0 and a negative number).
    pub(super) fn int_expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Num(x) => self.emit(I::I32Const(*x as i32)),
            ExprKind::Unary(_, x) => {
                let ExprKind::Num(v) = x.kind else {
                    unreachable!("int_shaped")
                };
                self.emit(I::I32Const(-v as i32));
            }
            ExprKind::Var(_) => match self.int_var(e) {
                Some(l) => self.emit(I::LocalGet(l)),
                None => {
                    let x = self.int_const(e).expect("int_shaped");
                    self.emit(I::I32Const(x));
                }
            },
            ExprKind::Bin(op, a, b) => {
                let (x, y, r) = (
                    self.local(ValType::I32),
                    self.local(ValType::I32),
                    self.local(ValType::I64),
                );
                self.int_expr(a);
                self.emit(I::LocalSet(x));
                self.int_expr(b);
                self.emit(I::LocalSet(y));
                self.emit(I::LocalGet(x));
                self.emit(I::I64ExtendI32S);
                self.emit(I::LocalGet(y));
                self.emit(I::I64ExtendI32S);
                self.emit(match op {
                    BinOp::Add => I::I64Add,
                    BinOp::Sub => I::I64Sub,
                    _ => I::I64Mul,
                });
                self.emit(I::LocalTee(r));
                self.emit(I::LocalGet(r));
                self.emit(I::I32WrapI64);
                self.emit(I::I64ExtendI32S);
                self.emit(I::I64Ne);
                if *op == BinOp::Mul {
                    // 0 times a negative number is -0.
                    self.emit(I::LocalGet(r));
                    self.emit(I::I64Eqz);
                    self.emit(I::LocalGet(x));
                    self.emit(I::LocalGet(y));
                    self.emit(I::I32Or);
                    self.emit(I::I32Const(0));
                    self.emit(I::I32LtS);
                    self.emit(I::I32And);
                    self.emit(I::I32Or);
                }
                self.leave_if(e.start);
                self.emit(I::LocalGet(r));
                self.emit(I::I32WrapI64);
            }
            _ => unreachable!("int_shaped"),
        }
    }

    /// The value of `e` if it names a module-level `const` of an int32.
    fn int_const(&self, e: &Expr) -> Option<i32> {
        let ExprKind::Var(name) = &e.kind else {
            return None;
        };
        let Some((Binding::Const(i), _)) = self.lookup(name) else {
            return None;
        };
        match self.m.program.consts[i].1.kind {
            ExprKind::Num(x) if int32_literal(x) => Some(x as i32),
            _ => None,
        }
    }

    /// The `i32` local of `e` if it is a read, reached in the trace, of a
    /// variable kept as an int32.
    fn int_var(&self, e: &Expr) -> Option<u32> {
        let ExprKind::Var(name) = &e.kind else {
            return None;
        };
        if e.id.is_some_and(|id| self.m.trace.mask(id) == 0) {
            return None;
        }
        match self.lookup(name) {
            Some((Binding::Int(l, _), false)) => Some(l),
            _ => None,
        }
    }

    pub(super) fn assignable(&mut self, name: &str) -> R<(Binding, Ty)> {
        match self.lookup(name) {
            Some((b @ Binding::Local(_, _), false)) => {
                let Binding::Local(_, t) = &b else {
                    unreachable!()
                };
                let t = t.clone();
                Ok((b, t))
            }
            Some((b @ Binding::Global(_, _), _)) => {
                let Binding::Global(_, t) = &b else {
                    unreachable!()
                };
                let t = t.clone();
                Ok((b, t))
            }
            Some((b @ Binding::Int(..), false)) => Ok((b, Ty::Num)),
            _ => refuse(format!("assigning to `{name}`")),
        }
    }

    pub(super) fn assign(&mut self, op: Option<BinOp>, target: &Target, value: &Expr) -> R<Ty> {
        match target {
            Target::Var(name) => {
                let (b, t) = self.assignable(name)?;
                if let (Binding::Int(l, _), None) = (&b, op)
                    && self.int_shaped(value)
                {
                    self.int_expr(value);
                    self.emit(I::LocalTee(*l));
                    self.emit(I::F64ConvertI32S);
                    return Ok(Ty::Num);
                }
                let tv = match op {
                    None => self.expr(value)?,
                    Some(BinOp::Add) if t == Ty::Str => {
                        self.get(&b);
                        self.string_of(value)?;
                        self.emit(I::Call(CONCAT));
                        Ty::Str
                    }
                    Some(op) => {
                        self.get(&b);
                        self.num(value)?;
                        if t != Ty::Num {
                            return refuse(format!("`{op:?}=` on a {t:?}"));
                        }
                        self.num_op(op);
                        Ty::Num
                    }
                };
                if tv != t {
                    return refuse(format!("`{name}` assigned a {tv:?}; it held a {t:?}"));
                }
                let v = self.local(
                    t.val()
                        .ok_or_else(|| Refused::new("assigning a non-value".into()))?,
                );
                self.emit(I::LocalTee(v));
                self.set(&b);
                self.emit(I::LocalGet(v));
                Ok(t)
            }
            Target::Index(..) | Target::Member(..) => {
                let slot = self.place(target)?;
                let elem = slot.value();
                let addr = self.local(ValType::I32);
                self.emit(I::LocalTee(addr));
                match op {
                    None => {
                        if self.expr(value)? != elem {
                            return refuse("an element or field assigned another kind of value");
                        }
                    }
                    Some(BinOp::Add) if elem == Ty::Str => {
                        self.emit(I::LocalGet(addr));
                        self.load_slot(&slot);
                        self.string_of(value)?;
                        self.emit(I::Call(CONCAT));
                    }
                    Some(op) => {
                        if elem != Ty::Num {
                            return refuse(
                                "a compound assignment to a non-number element or field",
                            );
                        }
                        self.emit(I::LocalGet(addr));
                        self.load_slot(&slot);
                        self.num(value)?;
                        self.num_op(op);
                    }
                }
                let v = self.local(
                    elem.val()
                        .ok_or_else(|| Refused::new("assigning a non-value".into()))?,
                );
                self.emit(I::LocalTee(v));
                self.store_slot(&slot);
                self.emit(I::LocalGet(v));
                Ok(elem)
            }
        }
    }

    pub(super) fn call(&mut self, name: &str, args: &[Expr]) -> R<Ty> {
        match self.lookup(name) {
            Some((Binding::Func(id), _)) => {
                let sig = self.m.signature(id)?;
                if sig.params.len() != args.len() {
                    return refuse(format!(
                        "`{name}` called with {} arguments; it has {}",
                        args.len(),
                        sig.params.len()
                    ));
                }
                for (a, want) in args.iter().zip(&sig.params) {
                    let t = self.expr(a)?;
                    if &t != want {
                        // The trace saw other kinds at this parameter.
                        if t.val().is_some() {
                            self.emit(I::Drop);
                        }
                        self.leave(a.start);
                        return Ok(sig.ret.clone());
                    }
                }
                // Compiled (if not yet) in the scope it was declared in.
                let upto = self
                    .scopes
                    .iter()
                    .rposition(|s| s.contains_key(name))
                    .map_or(0, |k| k + 1);
                let outer: Vec<_> = self
                    .outer
                    .iter()
                    .chain(self.scopes[..upto].iter())
                    .cloned()
                    .collect();
                let index = self.m.function(id, &outer)?;
                self.emit(I::Call(index));
                Ok(sig.ret.clone())
            }
            Some(_) => refuse(format!("calling `{name}`, which is not a function")),
            None => match (name, args) {
                ("String", [x]) => {
                    self.string_of(x)?;
                    Ok(Ty::Str)
                }
                ("Number", [x]) => match self.expr(x)? {
                    Ty::Num => Ok(Ty::Num),
                    Ty::Str => {
                        self.emit(I::Call(STR_TO_NUM));
                        Ok(Ty::Num)
                    }
                    Ty::Bool => {
                        self.emit(I::F64ConvertI32U);
                        Ok(Ty::Num)
                    }
                    t => refuse(format!("Number() of a {t:?}")),
                },
                _ => refuse(format!("calling `{name}`")),
            },
        }
    }

    pub(super) fn method(&mut self, obj: &Expr, name: &str, args: &[Expr]) -> R<Ty> {
        let t = self.expr(obj)?;
        Ok(match (&t, name, args) {
            (Ty::Math, "floor" | "ceil" | "trunc" | "sqrt" | "abs", [x]) => {
                self.num(x)?;
                self.emit(match name {
                    "floor" => I::F64Floor,
                    "ceil" => I::F64Ceil,
                    "trunc" => I::F64Trunc,
                    "sqrt" => I::F64Sqrt,
                    _ => I::F64Abs,
                });
                Ty::Num
            }
            (Ty::Math, "min" | "max", [x, y]) => {
                self.num(x)?;
                self.num(y)?;
                self.emit(if name == "min" { I::F64Min } else { I::F64Max });
                Ty::Num
            }
            (Ty::Json, "stringify", [x]) => {
                self.json_stringify(x)?;
                Ty::Str
            }
            (Ty::ResponseCtor, "json", [x]) | (Ty::ResponseCtor, "json", [x, _]) => {
                return self.make_response(json::Body::Json(x), args.get(1));
            }
            (Ty::Math, "random", []) => {
                self.emit(I::Call(RANDOM));
                Ty::Num
            }
            // The isolate's `Date.now()` is the host's wall clock in whole
            // milliseconds, `performance.now()` its monotonic clock in
            // fractional ones: the same host calls, the same arithmetic.
            (Ty::DateCtor, "now", []) => {
                self.clock(CLOCK_REALTIME);
                self.emit(I::I64Const(1_000_000));
                self.emit(I::I64DivU);
                self.emit(I::F64ConvertI64U);
                Ty::Num
            }
            (Ty::Performance, "now", []) => {
                self.clock(CLOCK_MONOTONIC);
                self.emit(I::F64ConvertI64U);
                self.emit(I::F64Const(1e6.into()));
                self.emit(I::F64Div);
                Ty::Num
            }
            (Ty::Math, "imul", [x, y]) => {
                self.num(x)?;
                self.int32();
                self.num(y)?;
                self.int32();
                self.emit(I::I32Mul);
                self.emit(I::F64ConvertI32S);
                Ty::Num
            }
            (Ty::StringCtor, "fromCharCode", [x]) => {
                // A one-unit string: ToUint16 of the number.
                let s = self.local(ValType::I32);
                self.emit(I::I32Const(6));
                self.emit(I::Call(ALLOC));
                self.emit(I::LocalTee(s));
                self.emit(I::I32Const(1));
                self.emit(I::I32Store(mem(0, 2)));
                self.emit(I::LocalGet(s));
                self.num(x)?;
                self.int32();
                self.emit(I::I32Store16(mem(layout::STR_UNITS, 1)));
                self.emit(I::LocalGet(s));
                Ty::Str
            }
            (Ty::Str, "charCodeAt", [i]) => {
                // Out of range is NaN, not a guard.
                let s = self.local(ValType::I32);
                self.emit(I::LocalSet(s));
                self.num(i)?;
                let x = self.local(ValType::F64);
                let k = self.local(ValType::I32);
                self.emit(I::LocalTee(x));
                self.emit(I::F64Trunc);
                self.emit(I::LocalGet(x));
                self.emit(I::F64Ne);
                self.emit(I::If(BlockType::Empty));
                // A fractional index is truncated in JavaScript.
                self.leave(i.start);
                self.emit(I::End);
                self.emit(I::LocalGet(x));
                self.emit(I::I32TruncSatF64U);
                self.emit(I::LocalTee(k));
                self.emit(I::F64ConvertI32U);
                self.emit(I::LocalGet(x));
                self.emit(I::F64Eq);
                self.emit(I::LocalGet(k));
                self.emit(I::LocalGet(s));
                self.emit(I::I32Load(mem(0, 2)));
                self.emit(I::I32LtU);
                self.emit(I::I32And);
                self.emit(I::If(BlockType::Result(ValType::F64)));
                self.emit(I::LocalGet(s));
                self.emit(I::LocalGet(k));
                self.emit(I::I32Const(1));
                self.emit(I::I32Shl);
                self.emit(I::I32Add);
                self.emit(I::I32Load16U(mem(layout::STR_UNITS, 1)));
                self.emit(I::F64ConvertI32U);
                self.emit(I::Else);
                self.emit(I::F64Const(f64::NAN.into()));
                self.emit(I::End);
                Ty::Num
            }
            (Ty::U8 | Ty::I32A | Ty::F64A, "fill", [v]) => {
                let a = self.local(ValType::I32);
                self.emit(I::LocalSet(a));
                self.num(v)?;
                let x = self.local(ValType::F64);
                self.emit(I::LocalSet(x));
                self.for_each_index(a, |f, i| {
                    f.emit(I::LocalGet(a));
                    f.emit(I::I32Const(layout::TYPED_DATA as i32));
                    f.emit(I::I32Add);
                    f.emit(I::LocalGet(i));
                    f.emit(I::I32Const(t.elem_size() as i32));
                    f.emit(I::I32Mul);
                    f.emit(I::I32Add);
                    f.emit(I::LocalGet(x));
                    f.store_element(&t);
                    Ok(())
                })?;
                self.emit(I::LocalGet(a));
                t.clone()
            }
            (Ty::Arr(elem), "push", [v]) => {
                let elem = (**elem).clone();
                let a = self.local(ValType::I32);
                self.emit(I::LocalSet(a));
                if self.expr(v)? != elem {
                    return refuse("an array pushed another kind of value");
                }
                let x = self.local(
                    elem.val()
                        .ok_or_else(|| Refused::new("pushing a non-value".into()))?,
                );
                self.emit(I::LocalSet(x));
                self.grow_if_full(a, elem_bytes(&elem) as i32);
                // data + len * size = x; len += 1
                let i = self.local(ValType::I32);
                self.emit(I::LocalGet(a));
                self.emit(I::I32Load(mem(0, 2)));
                self.emit(I::LocalSet(i));
                self.arr_elem_addr(a, i, &elem);
                self.emit(I::LocalGet(x));
                self.store_at(&elem, 0);
                self.emit(I::LocalGet(a));
                self.emit(I::LocalGet(i));
                self.emit(I::I32Const(1));
                self.emit(I::I32Add);
                self.emit(I::I32Store(mem(0, 2)));
                self.emit(I::LocalGet(i));
                self.emit(I::I32Const(1));
                self.emit(I::I32Add);
                self.emit(I::F64ConvertI32U);
                Ty::Num
            }
            _ => {
                return refuse(format!(
                    "the method `{name}` of a {t:?} with {} arguments",
                    args.len()
                ));
            }
        })
    }

    /// Runs `body` for every index `i` (an `i32` local) of the array or
    /// typed array in local `a`, its length read at every step.
    pub(super) fn for_each_index(
        &mut self,
        a: u32,
        mut body: impl FnMut(&mut Self, u32) -> R<()>,
    ) -> R<()> {
        let i = self.local(ValType::I32);
        self.emit(I::I32Const(0));
        self.emit(I::LocalSet(i));
        self.emit(I::Block(BlockType::Empty));
        self.emit(I::Loop(BlockType::Empty));
        self.emit(I::LocalGet(i));
        self.emit(I::LocalGet(a));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32GeU);
        self.emit(I::BrIf(1));
        body(self, i)?;
        self.emit(I::LocalGet(i));
        self.emit(I::I32Const(1));
        self.emit(I::I32Add);
        self.emit(I::LocalSet(i));
        self.emit(I::Br(0));
        self.emit(I::End);
        self.emit(I::End);
        Ok(())
    }

    /// Doubles the storage of array block `a` (`[len][cap][data]`, items
    /// of `size` bytes) when it is full: arrays' `push`, and the JSON
    /// parser's arrays and objects.
    pub(crate) fn grow_if_full(&mut self, a: u32, size: i32) {
        let (cap, data) = (self.local(ValType::I32), self.local(ValType::I32));
        self.emit(I::LocalGet(a));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::LocalGet(a));
        self.emit(I::I32Load(mem(layout::ARR_CAP, 2)));
        self.emit(I::I32GeU);
        self.emit(I::If(BlockType::Empty));
        self.emit(I::LocalGet(a));
        self.emit(I::I32Load(mem(layout::ARR_CAP, 2)));
        self.emit(I::I32Const(1));
        self.emit(I::I32Shl);
        self.emit(I::I32Const(4));
        self.emit(I::I32Add);
        self.emit(I::LocalTee(cap));
        self.emit(I::I32Const(size));
        self.emit(I::I32Mul);
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalTee(data));
        self.emit(I::LocalGet(a));
        self.emit(I::I32Load(mem(layout::ARR_DATA, 2)));
        self.emit(I::LocalGet(a));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Const(size));
        self.emit(I::I32Mul);
        self.emit(I::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        });
        self.emit(I::LocalGet(a));
        self.emit(I::LocalGet(cap));
        self.emit(I::I32Store(mem(layout::ARR_CAP, 2)));
        self.emit(I::LocalGet(a));
        self.emit(I::LocalGet(data));
        self.emit(I::I32Store(mem(layout::ARR_DATA, 2)));
        self.emit(I::End);
    }

    pub(super) fn new_(&mut self, class: &str, args: &[Expr]) -> R<Ty> {
        let t = match class {
            "Uint8Array" => Ty::U8,
            "Int32Array" => Ty::I32A,
            "Float64Array" => Ty::F64A,
            "Response" => return self.response(args),
            _ => return refuse(format!("`new {class}`")),
        };
        let [n] = args else {
            return refuse(format!("`new {class}` with {} arguments", args.len()));
        };
        self.num(n)?;
        // A length that is not a whole number below 2^28 is a RangeError
        // in JavaScript, or more memory than a sandbox has: leave.
        let x = self.local(ValType::F64);
        let len = self.local(ValType::I32);
        self.emit(I::LocalTee(x));
        self.emit(I::I32TruncSatF64U);
        self.emit(I::LocalTee(len));
        self.emit(I::F64ConvertI32U);
        self.emit(I::LocalGet(x));
        self.emit(I::F64Ne);
        self.emit(I::LocalGet(len));
        self.emit(I::I32Const(1 << 28));
        self.emit(I::I32GeU);
        self.emit(I::I32Or);
        self.leave_if(n.start);
        let a = self.local(ValType::I32);
        self.emit(I::LocalGet(len));
        self.emit(I::I32Const(t.elem_size() as i32));
        self.emit(I::I32Mul);
        self.emit(I::I32Const(layout::TYPED_DATA as i32));
        self.emit(I::I32Add);
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalTee(a));
        self.emit(I::LocalGet(len));
        self.emit(I::I32Store(mem(0, 2)));
        self.emit(I::LocalGet(a));
        Ok(t)
    }

    /// `new Response(body[, { status, headers }])`.
    pub(super) fn response(&mut self, args: &[Expr]) -> R<Ty> {
        if args.len() > 2 {
            return refuse("`new Response` with more than two arguments");
        }
        self.make_response(json::Body::Text(args.first()), args.get(1))
    }

    pub(super) fn member(&mut self, e: &Expr, obj: &Expr, name: &str) -> R<Ty> {
        let t = self.expr(obj)?;
        match (&t, name) {
            (Ty::DynObj, _) => self.parsed_field(e, name),
            (Ty::Str | Ty::U8 | Ty::I32A | Ty::F64A | Ty::Arr(_) | Ty::DynArr, "length") => {
                self.emit(I::I32Load(mem(0, 2)));
                self.emit(I::F64ConvertI32U);
                Ok(Ty::Num)
            }
            (Ty::Math, _) => {
                let v = match name {
                    "PI" => std::f64::consts::PI,
                    "E" => std::f64::consts::E,
                    "SQRT2" => std::f64::consts::SQRT_2,
                    "LN2" => std::f64::consts::LN_2,
                    _ => return refuse(format!("`Math.{name}`")),
                };
                self.emit(I::F64Const(v.into()));
                Ok(Ty::Num)
            }
            (Ty::Obj(_), _) => self.load_field(&t, name),
            (Ty::Hearth, "kv") => Ok(Ty::Kv),
            (Ty::Process, "env") => Ok(Ty::Env),
            (Ty::Env, _) => self.env_var(e, name),
            (Ty::Fetched, _) => self.fetched_field(name),
            _ => refuse(format!("the property `{name}` of a {t:?}")),
        }
    }

    pub(super) fn array(&mut self, elems: &[Expr]) -> R<Ty> {
        if elems.is_empty() {
            return refuse("an empty array literal (its element kind is unknown)");
        }
        // Evaluate the elements into locals, then lay them out.
        let mut vals = vec![];
        let mut elem = None;
        for e in elems {
            let t = self.expr(e)?;
            if elem.as_ref().is_some_and(|x| *x != t) {
                return refuse("an array literal of more than one kind of value");
            }
            let v = self.local(
                t.val()
                    .ok_or_else(|| Refused::new("an array of non-values".into()))?,
            );
            self.emit(I::LocalSet(v));
            vals.push(v);
            elem = Some(t);
        }
        let elem = elem.expect("not empty");
        let size = elem_bytes(&elem);
        let (a, data) = (self.local(ValType::I32), self.local(ValType::I32));
        self.emit(I::I32Const(12));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalSet(a));
        self.emit(I::I32Const((size as usize * vals.len()) as i32));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalSet(data));
        for (k, v) in vals.iter().enumerate() {
            self.emit(I::LocalGet(data));
            self.emit(I::LocalGet(*v));
            self.store_at(&elem, (k as u32 * size) as u64);
        }
        for (offset, value) in [(0, vals.len() as i32), (layout::ARR_CAP, vals.len() as i32)] {
            self.emit(I::LocalGet(a));
            self.emit(I::I32Const(value));
            self.emit(I::I32Store(mem(offset, 2)));
        }
        self.emit(I::LocalGet(a));
        self.emit(I::LocalGet(data));
        self.emit(I::I32Store(mem(layout::ARR_DATA, 2)));
        self.emit(I::LocalGet(a));
        Ok(Ty::Arr(Box::new(elem)))
    }
}

/// A number an `i32` holds exactly (not -0).
fn int32_literal(x: f64) -> bool {
    x.fract() == 0.0
        && x >= f64::from(i32::MIN)
        && x <= f64::from(i32::MAX)
        && !(x == 0.0 && x.is_sign_negative())
}
