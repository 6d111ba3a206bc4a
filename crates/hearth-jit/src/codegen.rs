//! [`ir`](crate::ir) plus its [`Trace`] to a WebAssembly module that the
//! wasm tier runs like any function: a WASI command that reads the request
//! body from stdin and writes a CGI response to stdout.
//!
//! Values are typed by what the trace saw, and represented unboxed:
//! numbers are `f64`, booleans `i32`, and strings, typed arrays, arrays
//! and responses are `i32` addresses in linear memory (layouts in
//! [`layout`]), allocated by a bump pointer that is never freed (each
//! invocation has a fresh instance). Where the code meets something its
//! trace did not (an expression never evaluated, an index out of range, a
//! number too large to print exactly), it calls `hearth.leave(at)`, which
//! ends the attempt; the node runs the invocation in the isolate instead.

use std::collections::{HashMap, HashSet};

use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, DataSection, EntityType, ExportKind, ExportSection,
    Function, FunctionSection, GlobalSection, GlobalType, ImportSection, Instruction as I, MemArg,
    MemorySection, MemoryType, Module, TypeSection, ValType,
};

use crate::Refused;
use crate::instrument::{Trace, tag};
use crate::ir::*;

/// Where compiled code keeps its values in linear memory.
pub mod layout {
    /// `[len: i32][units: u16 × len]`
    pub const STR_UNITS: u64 = 4;
    /// Typed arrays: `[len: i32][pad][elements]`
    pub const TYPED_DATA: u64 = 8;
    /// Arrays: `[len: i32][cap: i32][data: i32]`, elements 8 bytes
    /// (numbers) or 4 (anything else).
    pub const ARR_CAP: u64 = 4;
    pub const ARR_DATA: u64 = 8;
    /// Responses: `[status: f64][body: i32]`
    pub const RESP_BODY: u64 = 8;
    /// Scratch for WASI calls (an iovec and a count) and for printing
    /// numbers.
    pub const SCRATCH: u32 = 0;
    pub const DIGITS: u32 = 16;
    /// `Math.random`'s state: `[seeded: i32][xorshift128 words: i32 × 4]`.
    pub const RANDOM: u32 = 40;
    /// String literals start here.
    pub const DATA: u32 = 64;
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    Num,
    Bool,
    Str,
    U8,
    I32A,
    F64A,
    Arr(Box<Ty>),
    Request,
    Response,
    Undef,
    /// `Math`, `String`, `Date` and `performance` as objects (`Math.floor`,
    /// `String.fromCharCode`, `Date.now`, `performance.now`).
    Math,
    StringCtor,
    DateCtor,
    Performance,
}

impl Ty {
    fn val(&self) -> Option<ValType> {
        match self {
            Ty::Num => Some(ValType::F64),
            Ty::Undef | Ty::Math | Ty::StringCtor | Ty::DateCtor | Ty::Performance => None,
            _ => Some(ValType::I32),
        }
    }
    fn of_mask(mask: u32) -> Option<Ty> {
        let k = mask & tag::KINDS;
        Some(match k {
            0 => return None,
            k if k & !tag::NUMBER == 0 => Ty::Num,
            k if k & !tag::BOOLEAN == 0 => Ty::Bool,
            tag::STRING => Ty::Str,
            tag::UINT8ARRAY => Ty::U8,
            tag::INT32ARRAY => Ty::I32A,
            tag::FLOAT64ARRAY => Ty::F64A,
            tag::RESPONSE => Ty::Response,
            tag::REQUEST => Ty::Request,
            tag::UNDEFINED => Ty::Undef,
            _ => return None,
        })
    }
    fn elem_size(&self) -> u32 {
        match self {
            Ty::U8 => 1,
            Ty::I32A => 4,
            Ty::F64A => 8,
            Ty::Arr(e) if **e == Ty::Num => 8,
            _ => 4,
        }
    }
}

/// Why compiling a piece of code stopped: the whole function cannot be
/// compiled, or this piece was never reached in the trace (its place gets
/// a `leave`).
enum Stop {
    Refused(Refused),
    Unreached(u32),
}

impl From<Refused> for Stop {
    fn from(r: Refused) -> Stop {
        Stop::Refused(r)
    }
}

type R<T> = Result<T, Stop>;

fn refuse<T>(what: impl Into<String>) -> R<T> {
    Err(Stop::Refused(Refused::new(what.into())))
}

// Imported functions. Clocks and randomness are WASI's, which the wasm
// tier answers from the host layer (so they are taped as the isolate's
// `Date.now()` and `Math.random()` are).
pub(crate) const FD_WRITE: u32 = 0;
pub(crate) const FD_READ: u32 = 1;
const LEAVE: u32 = 2;
const CLOCK_TIME_GET: u32 = 3;
pub(crate) const RANDOM_GET: u32 = 4;
// Helpers, emitted by `helpers.rs`, in this order.
pub(crate) const ALLOC: u32 = 5;
pub(crate) const TO_INT32: u32 = 6;
pub(crate) const REM: u32 = 7;
pub(crate) const CONCAT: u32 = 8;
pub(crate) const NUM_TO_STR: u32 = 9;
pub(crate) const STR_EQ: u32 = 10;
pub(crate) const WRITE_RESPONSE: u32 = 11;
pub(crate) const READ_BODY: u32 = 12;
pub(crate) const STR_TO_NUM: u32 = 13;
const RANDOM: u32 = 14;
const FIRST_USER: u32 = 15;

/// WASI's clock ids.
const CLOCK_REALTIME: i32 = 0;
const CLOCK_MONOTONIC: i32 = 1;

/// The heap pointer is global 0.
pub(crate) const HEAP: u32 = 0;

pub(crate) fn mem(offset: u64, align: u32) -> MemArg {
    MemArg {
        offset,
        align,
        target: wasm_encoder::MemArgTarget::Memory(0),
        ordering: None,
    }
}

#[derive(Clone)]
enum Binding {
    Local(u32, Ty),
    Global(u32, Ty),
    Func(FuncId),
    Const(usize),
}

struct Sig {
    params: Vec<Ty>,
    ret: Ty,
}

/// Compiles `program` as `trace` saw it run.
pub fn compile(program: &Program, trace: &Trace) -> Result<Vec<u8>, Refused> {
    let mut m = ModuleBuilder {
        program,
        trace,
        data: vec![],
        strings: HashMap::new(),
        globals: vec![],
        index_of: HashMap::new(),
        bodies: HashMap::new(),
        types: vec![],
        func_types: vec![],
        sigs: HashMap::new(),
        captured: captured_names(program),
    };
    m.strings_for_helpers();
    // Module scope: consts and top-level functions.
    let mut module_scope = HashMap::new();
    for (i, (name, _)) in program.consts.iter().enumerate() {
        module_scope.insert(name.clone(), Binding::Const(i));
    }
    for (id, f) in program.funcs.iter().enumerate().skip(1) {
        if !f.nested && !f.name.is_empty() {
            module_scope.insert(f.name.clone(), Binding::Func(id));
        }
    }
    let handler = m.handler(vec![module_scope])?;
    m.finish(handler)
}

/// The names that functions nested in the handler use: the handler's
/// variables of these names live in globals, which those functions share.
fn captured_names(program: &Program) -> HashSet<String> {
    fn expr(e: &Expr, out: &mut HashSet<String>) {
        match &e.kind {
            ExprKind::Var(n) => {
                out.insert(n.clone());
            }
            ExprKind::Num(_) | ExprKind::Str(_) | ExprKind::Bool(_) | ExprKind::Arrow(_) => {}
            ExprKind::Bin(_, a, b) | ExprKind::Logic(_, a, b) | ExprKind::Index(a, b) => {
                expr(a, out);
                expr(b, out);
            }
            ExprKind::Unary(_, a) | ExprKind::Member(a, _) | ExprKind::Await(a) => expr(a, out),
            ExprKind::Update { target, .. } => tgt(target, out),
            ExprKind::Assign { target, value, .. } => {
                tgt(target, out);
                expr(value, out);
            }
            ExprKind::Cond(a, b, c) => {
                expr(a, out);
                expr(b, out);
                expr(c, out);
            }
            ExprKind::Call(n, args) => {
                out.insert(n.clone());
                args.iter().for_each(|a| expr(a, out));
            }
            ExprKind::New(_, args) | ExprKind::Array(args) | ExprKind::Template(_, args) => {
                args.iter().for_each(|a| expr(a, out))
            }
            ExprKind::Method(o, _, args) => {
                expr(o, out);
                args.iter().for_each(|a| expr(a, out));
            }
            ExprKind::Object(props) => props.iter().for_each(|(_, v)| expr(v, out)),
        }
    }
    fn tgt(t: &Target, out: &mut HashSet<String>) {
        match t {
            Target::Var(n) => {
                out.insert(n.clone());
            }
            Target::Index(a, b) => {
                expr(a, out);
                expr(b, out);
            }
        }
    }
    fn stmt(s: &Stmt, out: &mut HashSet<String>) {
        match s {
            Stmt::Let { init, .. } | Stmt::LetArray { init, .. } | Stmt::Expr(init) => {
                expr(init, out)
            }
            Stmt::Return(Some(e)) => expr(e, out),
            Stmt::If(t, a, b) => {
                expr(t, out);
                a.iter().chain(b).for_each(|s| stmt(s, out));
            }
            Stmt::While(t, b) | Stmt::DoWhile(b, t) => {
                expr(t, out);
                b.iter().for_each(|s| stmt(s, out));
            }
            Stmt::For {
                init,
                test,
                update,
                body,
            } => {
                init.iter().chain(body).for_each(|s| stmt(s, out));
                test.iter().chain(update).for_each(|e| expr(e, out));
            }
            Stmt::ForOf { iter, body, .. } => {
                expr(iter, out);
                body.iter().for_each(|s| stmt(s, out));
            }
            Stmt::Block(b) => b.iter().for_each(|s| stmt(s, out)),
            Stmt::Return(None) | Stmt::Break | Stmt::Continue | Stmt::Func(_) => {}
        }
    }
    let mut out = HashSet::new();
    for f in program.funcs.iter().filter(|f| f.nested) {
        f.body.iter().for_each(|s| stmt(s, &mut out));
    }
    out
}

pub(crate) struct ModuleBuilder<'p> {
    program: &'p Program,
    trace: &'p Trace,
    data: Vec<u8>,
    strings: HashMap<Vec<u16>, u32>,
    /// Globals after the heap pointer.
    globals: Vec<ValType>,
    /// Wasm function index of each program function compiled.
    index_of: HashMap<FuncId, u32>,
    bodies: HashMap<u32, (u32, Function)>,
    types: Vec<(Vec<ValType>, Vec<ValType>)>,
    /// Type of each user function, by wasm index − FIRST_USER.
    func_types: Vec<u32>,
    sigs: HashMap<FuncId, std::rc::Rc<Sig>>,
    captured: HashSet<String>,
}

impl ModuleBuilder<'_> {
    pub(crate) fn type_index(&mut self, params: Vec<ValType>, results: Vec<ValType>) -> u32 {
        let t = (params, results);
        if let Some(i) = self.types.iter().position(|x| *x == t) {
            return i as u32;
        }
        self.types.push(t);
        (self.types.len() - 1) as u32
    }

    /// The address of a string literal (interned).
    /// The address of raw bytes in the data segment.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) -> u32 {
        let at = layout::DATA + self.data.len() as u32;
        self.data.extend_from_slice(bytes);
        at
    }

    pub(crate) fn string(&mut self, units: &[u16]) -> u32 {
        if let Some(&at) = self.strings.get(units) {
            return at;
        }
        while !self.data.len().is_multiple_of(4) {
            self.data.push(0);
        }
        let at = layout::DATA + self.data.len() as u32;
        self.data
            .extend_from_slice(&(units.len() as u32).to_le_bytes());
        for u in units {
            self.data.extend_from_slice(&u.to_le_bytes());
        }
        self.strings.insert(units.to_vec(), at);
        at
    }

    fn strings_for_helpers(&mut self) {
        for s in ["true", "false", "NaN", "Infinity", "-Infinity", "0", ""] {
            let units: Vec<u16> = s.encode_utf16().collect();
            self.string(&units);
        }
    }

    pub(crate) fn str_addr(&mut self, s: &str) -> i32 {
        let units: Vec<u16> = s.encode_utf16().collect();
        self.string(&units) as i32
    }

    fn signature(&mut self, id: FuncId) -> R<std::rc::Rc<Sig>> {
        if let Some(s) = self.sigs.get(&id) {
            return Ok(s.clone());
        }
        let f = &self.program.funcs[id];
        let mut params = vec![];
        for p in &f.params {
            let mask = self.trace.mask(p.id);
            if mask == 0 {
                return Err(Stop::Unreached(f.body_start));
            }
            match Ty::of_mask(mask) {
                Some(t) if t != Ty::Undef => params.push(t),
                _ => {
                    return refuse(format!(
                        "parameter `{}` of {} took values of more than one kind",
                        p.name,
                        name_of(f)
                    ));
                }
            }
        }
        let mut ret = 0u32;
        fn returns(stmts: &[Stmt], trace: &Trace, out: &mut u32) {
            for s in stmts {
                match s {
                    Stmt::Return(Some(e)) => {
                        *out |= e.id.map_or(0, |id| trace.mask(id)) | literal_mask(e)
                    }
                    Stmt::If(_, a, b) => {
                        returns(a, trace, out);
                        returns(b, trace, out);
                    }
                    Stmt::While(_, b)
                    | Stmt::DoWhile(b, _)
                    | Stmt::Block(b)
                    | Stmt::ForOf { body: b, .. } => returns(b, trace, out),
                    Stmt::For { body, .. } => returns(body, trace, out),
                    _ => {}
                }
            }
        }
        returns(&f.body, self.trace, &mut ret);
        let ret = if ret == 0 {
            Ty::Undef
        } else {
            Ty::of_mask(ret).ok_or_else(|| {
                Refused::new(format!(
                    "{} returned values of more than one kind",
                    name_of(f)
                ))
            })?
        };
        let sig = std::rc::Rc::new(Sig { params, ret });
        self.sigs.insert(id, sig.clone());
        Ok(sig)
    }

    /// The wasm index of program function `id`, compiling it (with
    /// `outer` as the scope it was declared in) the first time.
    fn function(&mut self, id: FuncId, outer: &[HashMap<String, Binding>]) -> R<u32> {
        if let Some(&i) = self.index_of.get(&id) {
            return Ok(i);
        }
        let sig = self.signature(id)?;
        let index = FIRST_USER + self.func_types.len() as u32;
        let params: Vec<ValType> = sig.params.iter().filter_map(Ty::val).collect();
        let results: Vec<ValType> = sig.ret.val().into_iter().collect();
        let ty = self.type_index(params, results);
        self.func_types.push(ty);
        self.index_of.insert(id, index);
        let f = &self.program.funcs[id];
        let mut fb = FnBuilder::new(self, sig.params.len() as u32, sig.ret.clone(), false);
        fb.outer = outer.to_vec();
        let mut scope = HashMap::new();
        for (local, (p, t)) in (0..).zip(f.params.iter().zip(&sig.params)) {
            scope.insert(p.name.clone(), Binding::Local(local, t.clone()));
        }
        // A function may call itself by name.
        if !f.name.is_empty() {
            scope.insert(f.name.clone(), Binding::Func(id));
        }
        fb.scopes.push(scope);
        fb.block_body(&f.body)?;
        fb.fall_off_end()?;
        let body = fb.finish();
        self.bodies.insert(index, (ty, body));
        Ok(index)
    }

    fn handler(&mut self, outer: Vec<HashMap<String, Binding>>) -> Result<u32, Refused> {
        let f = &self.program.funcs[0];
        let ty = self.type_index(vec![], vec![ValType::I32]);
        let index = FIRST_USER + self.func_types.len() as u32;
        self.func_types.push(ty);
        self.index_of.insert(0, index);
        let mut fb = FnBuilder::new(self, 0, Ty::Response, true);
        fb.outer = outer;
        let mut scope = HashMap::new();
        if let Some(p) = f.params.first() {
            let l = fb.local(ValType::I32);
            scope.insert(p.name.clone(), Binding::Local(l, Ty::Request));
        }
        fb.scopes.push(scope);
        match fb.block_body(&f.body).and_then(|()| fb.fall_off_end()) {
            Ok(()) => {}
            Err(Stop::Refused(r)) => return Err(r),
            Err(Stop::Unreached(_)) => unreachable!("block_body stops at unreached code"),
        }
        let body = fb.finish();
        self.bodies.insert(index, (ty, body));
        Ok(index)
    }

    fn finish(mut self, handler: u32) -> Result<Vec<u8>, Refused> {
        let mut module = Module::new();
        // Types: imports and helpers first.
        let fd_io = self.type_index(vec![ValType::I32; 4], vec![ValType::I32]);
        let leave = self.type_index(vec![ValType::I32], vec![]);
        let clock = self.type_index(
            vec![ValType::I32, ValType::I64, ValType::I32],
            vec![ValType::I32],
        );
        let random = self.type_index(vec![ValType::I32; 2], vec![ValType::I32]);
        let start = self.type_index(vec![], vec![]);
        let helpers = crate::helpers::emit(&mut self);
        let mut types = TypeSection::new();
        for (p, r) in &self.types {
            types.ty().function(p.clone(), r.clone());
        }
        module.section(&types);
        let mut imports = ImportSection::new();
        imports.import(
            "wasi_snapshot_preview1",
            "fd_write",
            EntityType::Function(fd_io),
        );
        imports.import(
            "wasi_snapshot_preview1",
            "fd_read",
            EntityType::Function(fd_io),
        );
        imports.import("hearth", "leave", EntityType::Function(leave));
        imports.import(
            "wasi_snapshot_preview1",
            "clock_time_get",
            EntityType::Function(clock),
        );
        imports.import(
            "wasi_snapshot_preview1",
            "random_get",
            EntityType::Function(random),
        );
        module.section(&imports);
        let mut funcs = FunctionSection::new();
        for (ty, _) in &helpers {
            funcs.function(*ty);
        }
        for ty in &self.func_types {
            funcs.function(*ty);
        }
        let start_index = FIRST_USER + self.func_types.len() as u32;
        funcs.function(start);
        module.section(&funcs);
        let mut memory = MemorySection::new();
        memory.memory(MemoryType {
            minimum: 1,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        module.section(&memory);
        let mut globals = GlobalSection::new();
        let heap_start = (layout::DATA + self.data.len() as u32 + 7) & !7;
        globals.global(
            GlobalType {
                val_type: ValType::I32,
                mutable: true,
                shared: false,
            },
            &ConstExpr::i32_const(heap_start as i32),
        );
        for g in &self.globals {
            let init = match g {
                ValType::F64 => ConstExpr::f64_const(0.0.into()),
                _ => ConstExpr::i32_const(0),
            };
            globals.global(
                GlobalType {
                    val_type: *g,
                    mutable: true,
                    shared: false,
                },
                &init,
            );
        }
        module.section(&globals);
        let mut exports = ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0);
        exports.export("_start", ExportKind::Func, start_index);
        module.section(&exports);
        let mut code = CodeSection::new();
        for (_, body) in &helpers {
            code.function(body);
        }
        for i in FIRST_USER..start_index {
            let (_, body) = self
                .bodies
                .get(&i)
                .ok_or_else(|| Refused::new(format!("internal: function {i} has no body")))?;
            code.function(body);
        }
        let mut s = Function::new([]);
        s.instruction(&I::Call(handler));
        s.instruction(&I::Call(WRITE_RESPONSE));
        s.instruction(&I::End);
        code.function(&s);
        module.section(&code);
        let mut data = DataSection::new();
        data.active(
            0,
            &ConstExpr::i32_const(layout::DATA as i32),
            self.data.iter().copied(),
        );
        module.section(&data);
        Ok(module.finish())
    }
}

fn name_of(f: &Func) -> String {
    if f.name.is_empty() {
        "an arrow function".into()
    } else {
        format!("`{}`", f.name)
    }
}

/// The trace bits a literal would have had.
fn literal_mask(e: &Expr) -> u32 {
    match &e.kind {
        ExprKind::Num(n) if (*n as i32) as f64 == *n && !(*n == 0.0 && n.is_sign_negative()) => {
            tag::INT
        }
        ExprKind::Num(_) => tag::DOUBLE,
        ExprKind::Bool(b) => {
            if *b {
                tag::TRUE
            } else {
                tag::FALSE
            }
        }
        ExprKind::Str(_) => tag::STRING,
        _ => 0,
    }
}

struct Loop {
    /// Block depth of the `block` a `break` leaves and of the one a
    /// `continue` leaves.
    brk: u32,
    cont: u32,
}

pub(crate) struct FnBuilder<'m, 'p> {
    pub(crate) m: &'m mut ModuleBuilder<'p>,
    n_params: u32,
    locals: Vec<ValType>,
    pub(crate) code: Vec<I<'static>>,
    scopes: Vec<HashMap<String, Binding>>,
    /// The scopes of the function this one is nested in (and theirs).
    outer: Vec<HashMap<String, Binding>>,
    ret: Ty,
    handler: bool,
    depth: u32,
    loops: Vec<Loop>,
    /// Functions declared in each open block, compiled at its end.
    deferred: Vec<Vec<FuncId>>,
}

impl<'m, 'p> FnBuilder<'m, 'p> {
    pub(crate) fn new(m: &'m mut ModuleBuilder<'p>, n_params: u32, ret: Ty, handler: bool) -> Self {
        FnBuilder {
            m,
            n_params,
            locals: vec![],
            code: vec![],
            scopes: vec![],
            outer: vec![],
            ret,
            handler,
            depth: 0,
            loops: vec![],
            deferred: vec![],
        }
    }

    pub(crate) fn local(&mut self, t: ValType) -> u32 {
        self.locals.push(t);
        self.n_params + self.locals.len() as u32 - 1
    }

    pub(crate) fn emit(&mut self, i: I<'static>) {
        match i {
            I::Block(_) | I::Loop(_) | I::If(_) => self.depth += 1,
            I::End => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        self.code.push(i);
    }

    pub(crate) fn finish(mut self) -> Function {
        self.code.push(I::End);
        let mut f = Function::new_with_locals_types(self.locals.iter().copied());
        for i in &self.code {
            f.instruction(i);
        }
        f
    }

    /// Leaves the compiled code: the node runs the invocation in the
    /// isolate. `at` is a source offset, for the log.
    /// JavaScript's ToInt32 of the number on the stack: inline when it is
    /// an int32 already (loop counters, indexes), else by the helper.
    fn int32(&mut self) {
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
    fn rem(&mut self) {
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
    fn clock(&mut self, id: i32) {
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

    pub(crate) fn leave(&mut self, at: u32) {
        self.emit(I::I32Const(at as i32));
        self.emit(I::Call(LEAVE));
        self.emit(I::Unreachable);
    }

    /// Code from here on was never reached in the trace: leave, and close
    /// the blocks opened since `depth` so that the function still
    /// validates (after `unreachable` a block's type holds whatever is on
    /// the stack).
    fn abandon(&mut self, depth: u32, at: u32) {
        self.leave(at);
        while self.depth > depth {
            self.emit(I::End);
            self.emit(I::Unreachable);
        }
    }

    fn lookup(&self, name: &str) -> Option<(Binding, bool)> {
        for s in self.scopes.iter().rev() {
            if let Some(b) = s.get(name) {
                return Some((b.clone(), false));
            }
        }
        for s in self.outer.iter().rev() {
            if let Some(b) = s.get(name) {
                return Some((b.clone(), true));
            }
        }
        None
    }

    /// Declares a variable in the innermost scope: a global if a nested
    /// function may use it, else a local.
    fn declare(&mut self, name: &str, t: Ty) -> R<Binding> {
        let Some(v) = t.val() else {
            return refuse(format!("`{name}` holds a value that is not data"));
        };
        let b = if self.handler && self.m.captured.contains(name) {
            self.m.globals.push(v);
            Binding::Global(self.m.globals.len() as u32, t)
        } else {
            Binding::Local(self.local(v), t)
        };
        self.scopes
            .last_mut()
            .expect("a function has a scope")
            .insert(name.to_string(), b.clone());
        Ok(b)
    }

    fn set(&mut self, b: &Binding) {
        match b {
            Binding::Local(l, _) => self.emit(I::LocalSet(*l)),
            Binding::Global(g, _) => self.emit(I::GlobalSet(*g)),
            _ => {}
        }
    }

    fn get(&mut self, b: &Binding) {
        match b {
            Binding::Local(l, _) => self.emit(I::LocalGet(*l)),
            Binding::Global(g, _) => self.emit(I::GlobalGet(*g)),
            _ => {}
        }
    }

    // ---- statements ----

    /// A block's statements in a scope of their own. Code after a
    /// statement the trace never reached is not compiled: the statement
    /// leaves.
    fn block_body(&mut self, stmts: &[Stmt]) -> R<()> {
        self.scopes.push(HashMap::new());
        self.deferred.push(vec![]);
        // Function declarations are hoisted.
        for s in stmts {
            if let Stmt::Func(id) = s {
                let name = self.m.program.funcs[*id].name.clone();
                self.scopes
                    .last_mut()
                    .expect("pushed above")
                    .insert(name, Binding::Func(*id));
                self.deferred.last_mut().expect("pushed above").push(*id);
            }
        }
        let mut result = Ok(());
        for s in stmts {
            let depth = self.depth;
            match self.stmt(s) {
                Ok(()) => {}
                Err(Stop::Unreached(at)) => {
                    self.abandon(depth, at);
                    break;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let deferred = self.deferred.pop().expect("pushed above");
        if result.is_ok() {
            let outer: Vec<_> = self
                .outer
                .iter()
                .chain(self.scopes.iter())
                .cloned()
                .collect();
            for id in deferred {
                match self.m.function(id, &outer) {
                    Ok(_) | Err(Stop::Unreached(_)) => {}
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        self.scopes.pop();
        result
    }

    fn fall_off_end(&mut self) -> R<()> {
        if self.ret == Ty::Undef {
            self.emit(I::Return);
        } else {
            // JavaScript would return undefined: not what the trace saw.
            self.leave(0);
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::Let { name, init } => {
                if let ExprKind::Arrow(id) = init.kind {
                    self.scopes
                        .last_mut()
                        .expect("in a block")
                        .insert(name.clone(), Binding::Func(id));
                    self.deferred.last_mut().expect("in a block").push(id);
                    return Ok(());
                }
                let t = self.expr(init)?;
                let b = self.declare(name, t)?;
                self.set(&b);
            }
            Stmt::LetArray { names, init } => {
                let t = self.expr(init)?;
                let tmp = self.local(ValType::I32);
                self.emit(I::LocalSet(tmp));
                self.destructure(names, &t, tmp, init.start)?;
            }
            Stmt::Expr(e) => {
                let t = self.expr(e)?;
                if t.val().is_some() {
                    self.emit(I::Drop);
                }
            }
            Stmt::If(t, a, b) => {
                self.test(t)?;
                self.emit(I::If(BlockType::Empty));
                self.block_body(a)?;
                if !b.is_empty() {
                    self.emit(I::Else);
                    self.block_body(b)?;
                }
                self.emit(I::End);
            }
            Stmt::While(t, body) => {
                self.loop_(Some(t), None, body, false)?;
            }
            Stmt::DoWhile(body, t) => {
                self.loop_(Some(t), None, body, true)?;
            }
            Stmt::For {
                init,
                test,
                update,
                body,
            } => {
                self.scopes.push(HashMap::new());
                let r = (|| {
                    for s in init {
                        self.stmt(s)?;
                    }
                    self.loop_(test.as_ref(), update.as_ref(), body, false)
                })();
                self.scopes.pop();
                r?;
            }
            Stmt::ForOf {
                names,
                pattern,
                iter,
                body,
            } => self.for_of(names, *pattern, iter, body)?,
            Stmt::Break => {
                let l = self
                    .loops
                    .last()
                    .ok_or_else(|| Refused::new("`break` outside a loop".into()))?;
                let to = self.depth - l.brk - 1;
                self.emit(I::Br(to));
            }
            Stmt::Continue => {
                let l = self
                    .loops
                    .last()
                    .ok_or_else(|| Refused::new("`continue` outside a loop".into()))?;
                let to = self.depth - l.cont - 1;
                self.emit(I::Br(to));
            }
            Stmt::Return(e) => {
                let t = match e {
                    Some(e) => self.expr(e)?,
                    None => Ty::Undef,
                };
                if t != self.ret {
                    // The trace saw this function return another kind.
                    if t.val().is_some() {
                        self.emit(I::Drop);
                    }
                    self.leave(e.as_ref().map_or(0, |e| e.start));
                } else {
                    self.emit(I::Return);
                }
            }
            Stmt::Block(b) => self.block_body(b)?,
            Stmt::Func(_) => {}
        }
        Ok(())
    }

    /// `while` (`bottom`: `do … while`) and `for` loops:
    /// `block(brk) loop block(cont) [test] body end [update] br loop end end`.
    fn loop_(
        &mut self,
        test: Option<&Expr>,
        update: Option<&Expr>,
        body: &[Stmt],
        bottom: bool,
    ) -> R<()> {
        let brk = self.depth;
        self.emit(I::Block(BlockType::Empty));
        self.emit(I::Loop(BlockType::Empty));
        if let (Some(t), false) = (test, bottom) {
            self.test(t)?;
            self.emit(I::I32Eqz);
            self.emit(I::BrIf(1));
        }
        let cont = self.depth;
        self.emit(I::Block(BlockType::Empty));
        self.loops.push(Loop { brk, cont });
        let r = self.block_body(body);
        self.loops.pop();
        r?;
        self.emit(I::End);
        if let Some(u) = update {
            let t = self.expr(u)?;
            if t.val().is_some() {
                self.emit(I::Drop);
            }
        }
        if let (Some(t), true) = (test, bottom) {
            self.test(t)?;
            self.emit(I::BrIf(0));
        } else {
            self.emit(I::Br(0));
        }
        self.emit(I::End);
        self.emit(I::End);
        Ok(())
    }

    fn for_of(&mut self, names: &[String], pattern: bool, iter: &Expr, body: &[Stmt]) -> R<()> {
        let t = match &iter.kind {
            // A table written out in the loop (`for (const [dx, dy] of
            // [[1, 0], …])`) is built once per invocation, not per pass,
            // when no pass can reach it to change it: its elements are
            // numbers, strings or booleans, or arrays only destructured.
            ExprKind::Array(elems)
                if elems.iter().all(constant)
                    && (pattern || elems.iter().all(|e| !matches!(e.kind, ExprKind::Array(_)))) =>
            {
                self.m.globals.push(ValType::I32);
                let g = self.m.globals.len() as u32;
                self.emit(I::GlobalGet(g));
                self.emit(I::I32Eqz);
                self.emit(I::If(BlockType::Empty));
                // Unreached, the statement is abandoned, this `if` with it.
                let t = self.expr(iter)?;
                self.emit(I::GlobalSet(g));
                self.emit(I::End);
                self.emit(I::GlobalGet(g));
                t
            }
            _ => self.expr(iter)?,
        };
        let Ty::Arr(elem) = t else {
            return refuse("for-of over something other than an array");
        };
        let arr = self.local(ValType::I32);
        self.emit(I::LocalSet(arr));
        let i = self.local(ValType::I32);
        self.emit(I::I32Const(0));
        self.emit(I::LocalSet(i));
        let brk = self.depth;
        self.emit(I::Block(BlockType::Empty));
        self.emit(I::Loop(BlockType::Empty));
        // The iterator reads the length at every step.
        self.emit(I::LocalGet(i));
        self.emit(I::LocalGet(arr));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32GeU);
        self.emit(I::BrIf(1));
        self.scopes.push(HashMap::new());
        self.arr_elem_addr(arr, i, &elem);
        self.load(&elem);
        if pattern {
            let tmp = self.local(ValType::I32);
            self.emit(I::LocalSet(tmp));
            self.destructure(names, &elem, tmp, iter.start)?;
        } else {
            let b = self.declare(&names[0], (*elem).clone())?;
            self.set(&b);
        }
        self.emit(I::LocalGet(i));
        self.emit(I::I32Const(1));
        self.emit(I::I32Add);
        self.emit(I::LocalSet(i));
        let cont = self.depth;
        self.emit(I::Block(BlockType::Empty));
        self.loops.push(Loop { brk, cont });
        let r = self.block_body(body);
        self.loops.pop();
        self.scopes.pop();
        r?;
        self.emit(I::End);
        self.emit(I::Br(0));
        self.emit(I::End);
        self.emit(I::End);
        Ok(())
    }

    /// `const [a, b] = arr`, `arr` (of type `t`) in local `from`.
    fn destructure(&mut self, names: &[String], t: &Ty, from: u32, at: u32) -> R<()> {
        let Ty::Arr(elem) = t else {
            return refuse("destructuring something other than an array");
        };
        // Fewer elements than names would give undefined: leave.
        self.emit(I::LocalGet(from));
        self.emit(I::I32Load(mem(0, 2)));
        self.emit(I::I32Const(names.len() as i32));
        self.emit(I::I32LtU);
        self.emit(I::If(BlockType::Empty));
        self.leave(at);
        self.emit(I::End);
        for (k, name) in names.iter().enumerate() {
            self.emit(I::LocalGet(from));
            self.emit(I::I32Load(mem(layout::ARR_DATA, 2)));
            self.load_at(elem, (k as u32 * elem_bytes(elem)) as u64);
            let b = self.declare(name, (**elem).clone())?;
            self.set(&b);
        }
        Ok(())
    }

    // ---- memory ----

    /// Pushes the address of `arr[i]` (locals), an array of `elem`s.
    fn arr_elem_addr(&mut self, arr: u32, i: u32, elem: &Ty) {
        self.emit(I::LocalGet(arr));
        self.emit(I::I32Load(mem(layout::ARR_DATA, 2)));
        self.emit(I::LocalGet(i));
        self.emit(I::I32Const(elem_bytes(elem) as i32));
        self.emit(I::I32Mul);
        self.emit(I::I32Add);
    }

    fn load(&mut self, elem: &Ty) {
        self.load_at(elem, 0)
    }

    fn load_at(&mut self, elem: &Ty, offset: u64) {
        match elem.val() {
            Some(ValType::F64) => self.emit(I::F64Load(mem(offset, 3))),
            _ => self.emit(I::I32Load(mem(offset, 2))),
        }
    }

    /// Pops an index (a number) and pushes it as an `i32` known to be an
    /// integer below the length at `len_of` (the address of a `[len, …]`
    /// block), or leaves.
    fn checked_index(&mut self, obj: u32, at: u32) {
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
        self.emit(I::If(BlockType::Empty));
        self.leave(at);
        self.emit(I::End);
        self.emit(I::LocalGet(i));
    }

    /// For `obj[idx]` (typed array or array): evaluates both, checks the
    /// index, and leaves the element's address on the stack. Returns the
    /// object's type.
    fn element(&mut self, obj: &Expr, idx: &Expr) -> R<Ty> {
        let t = self.expr(obj)?;
        if !matches!(t, Ty::U8 | Ty::I32A | Ty::F64A | Ty::Arr(_)) {
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
        if let Ty::Arr(_) = t {
            self.emit(I::I32Load(mem(layout::ARR_DATA, 2)));
        } else {
            self.emit(I::I32Const(layout::TYPED_DATA as i32));
            self.emit(I::I32Add);
        }
        self.emit(I::I32Add);
        Ok(t)
    }

    /// Loads an element of `t` at the address on the stack, as its value.
    fn load_element(&mut self, t: &Ty) -> Ty {
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
    fn store_element(&mut self, t: &Ty) {
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
            Ty::Arr(e) => match e.val() {
                Some(ValType::F64) => self.emit(I::F64Store(mem(0, 3))),
                _ => self.emit(I::I32Store(mem(0, 2))),
            },
            _ => {}
        }
    }

    /// The element type a value stored into `t` must have.
    fn element_value(t: &Ty) -> Ty {
        match t {
            Ty::Arr(e) => (**e).clone(),
            _ => Ty::Num,
        }
    }

    // ---- expressions ----

    /// Pushes `e`'s truthiness as an `i32`.
    fn test(&mut self, e: &Expr) -> R<()> {
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
    fn test_or_leave(&mut self, e: &Expr) -> R<()> {
        let depth = self.depth;
        match self.test(e) {
            Err(Stop::Unreached(at)) => {
                self.abandon(depth, at);
                Ok(())
            }
            other => other,
        }
    }

    fn truthy(&mut self, t: &Ty) {
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
            Ty::Math | Ty::StringCtor | Ty::DateCtor | Ty::Performance => self.emit(I::I32Const(1)),
            _ => {
                self.emit(I::Drop);
                self.emit(I::I32Const(1));
            }
        }
    }

    /// `e`, which must be a number.
    fn num(&mut self, e: &Expr) -> R<()> {
        match self.expr(e)? {
            Ty::Num => Ok(()),
            t => refuse(format!(
                "a {t:?} where a number is needed, at offset {}",
                e.start
            )),
        }
    }

    /// `e` converted to a string (`String(e)`, template parts, `+`).
    fn string_of(&mut self, e: &Expr) -> R<()> {
        let t = self.expr(e)?;
        self.stringify(&t)
    }

    fn stringify(&mut self, t: &Ty) -> R<()> {
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
    fn expr_or_leave(&mut self, e: &Expr) -> R<Option<Ty>> {
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

    fn expr(&mut self, e: &Expr) -> R<Ty> {
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
            ExprKind::Call(name, args) => self.call(name, args, e.start)?,
            ExprKind::Method(obj, name, args) => self.method(obj, name, args)?,
            ExprKind::New(class, args) => self.new_(class, args)?,
            ExprKind::Member(obj, name) => self.member(obj, name)?,
            ExprKind::Index(obj, idx) => {
                let t = self.element(obj, idx)?;
                self.load_element(&t)
            }
            ExprKind::Array(elems) => self.array(elems)?,
            ExprKind::Object(_) => {
                return refuse("an object literal outside `new Response(body, { status })`");
            }
            ExprKind::Arrow(_) => return refuse("a function used as a value"),
            ExprKind::Await(inner) => match &inner.kind {
                ExprKind::Method(obj, name, args) if name == "text" && args.is_empty() => {
                    if let Some(id) = inner.id
                        && self.m.trace.mask(id) == 0
                    {
                        return Err(Stop::Unreached(inner.start));
                    }
                    if self.expr(obj)? != Ty::Request {
                        return refuse("`await x.text()` of something other than the request");
                    }
                    self.emit(I::Drop);
                    self.emit(I::Call(READ_BODY));
                    Ty::Str
                }
                _ => return refuse("`await` of something other than `request.text()`"),
            },
        })
    }

    fn var(&mut self, name: &str) -> R<Ty> {
        match self.lookup(name) {
            Some((Binding::Local(l, t), false)) => {
                self.emit(I::LocalGet(l));
                Ok(t)
            }
            Some((Binding::Local(..), true)) => refuse(format!(
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
            None => match name {
                "Math" => Ok(Ty::Math),
                "String" => Ok(Ty::StringCtor),
                "Date" => Ok(Ty::DateCtor),
                "performance" => Ok(Ty::Performance),
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

    fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr) -> R<Ty> {
        use BinOp::*;
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
            if ta != tb {
                return refuse(format!("comparing a {ta:?} with a {tb:?}"));
            }
            match ta {
                Ty::Num => self.emit(I::F64Eq),
                Ty::Bool => self.emit(I::I32Eq),
                Ty::Str => self.emit(I::Call(STR_EQ)),
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
    fn num_op(&mut self, op: BinOp) {
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

    fn update(&mut self, increment: bool, prefix: bool, target: &Target) -> R<Ty> {
        let delta = |fb: &mut Self| {
            fb.emit(I::F64Const(1.0.into()));
            fb.emit(if increment { I::F64Add } else { I::F64Sub });
        };
        match target {
            Target::Var(name) => {
                let (b, t) = self.assignable(name)?;
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
            Target::Index(obj, idx) => {
                let t = self.element(obj, idx)?;
                if Self::element_value(&t) != Ty::Num {
                    return refuse("`++`/`--` of a non-number element");
                }
                let addr = self.local(ValType::I32);
                let old = self.local(ValType::F64);
                self.emit(I::LocalTee(addr));
                self.emit(I::LocalGet(addr));
                self.load_element(&t);
                self.emit(I::LocalTee(old));
                delta(self);
                self.store_element(&t);
                // What a typed array holds after the store is what the
                // expression is worth in JavaScript only for prefix forms
                // of an in-range value; read it back.
                if prefix {
                    self.emit(I::LocalGet(addr));
                    self.load_element(&t);
                } else {
                    self.emit(I::LocalGet(old));
                }
            }
        }
        Ok(Ty::Num)
    }

    fn assignable(&mut self, name: &str) -> R<(Binding, Ty)> {
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
            _ => refuse(format!("assigning to `{name}`")),
        }
    }

    fn assign(&mut self, op: Option<BinOp>, target: &Target, value: &Expr) -> R<Ty> {
        match target {
            Target::Var(name) => {
                let (b, t) = self.assignable(name)?;
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
            Target::Index(obj, idx) => {
                let t = self.element(obj, idx)?;
                let elem = Self::element_value(&t);
                let addr = self.local(ValType::I32);
                self.emit(I::LocalTee(addr));
                match op {
                    None => {
                        if self.expr(value)? != elem {
                            return refuse("an element assigned another kind of value");
                        }
                    }
                    Some(op) => {
                        if elem != Ty::Num {
                            return refuse("a compound assignment to a non-number element");
                        }
                        self.emit(I::LocalGet(addr));
                        self.load_element(&t);
                        self.num(value)?;
                        self.num_op(op);
                    }
                }
                let v = self.local(
                    elem.val()
                        .ok_or_else(|| Refused::new("assigning a non-value".into()))?,
                );
                self.emit(I::LocalTee(v));
                self.store_element(&t);
                self.emit(I::LocalGet(v));
                Ok(elem)
            }
        }
    }

    fn call(&mut self, name: &str, args: &[Expr], at: u32) -> R<Ty> {
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
                        self.emit(I::I32Const(at as i32));
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

    fn method(&mut self, obj: &Expr, name: &str, args: &[Expr]) -> R<Ty> {
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
                self.emit(I::LocalGet(a));
                self.emit(I::I32Const(layout::TYPED_DATA as i32));
                self.emit(I::I32Add);
                self.emit(I::LocalGet(i));
                self.emit(I::I32Const(t.elem_size() as i32));
                self.emit(I::I32Mul);
                self.emit(I::I32Add);
                self.emit(I::LocalGet(x));
                self.store_element(&t);
                self.emit(I::LocalGet(i));
                self.emit(I::I32Const(1));
                self.emit(I::I32Add);
                self.emit(I::LocalSet(i));
                self.emit(I::Br(0));
                self.emit(I::End);
                self.emit(I::End);
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
                self.grow_if_full(a, &elem);
                // data + len * size = x; len += 1
                let i = self.local(ValType::I32);
                self.emit(I::LocalGet(a));
                self.emit(I::I32Load(mem(0, 2)));
                self.emit(I::LocalSet(i));
                self.arr_elem_addr(a, i, &elem);
                self.emit(I::LocalGet(x));
                match elem.val() {
                    Some(ValType::F64) => self.emit(I::F64Store(mem(0, 3))),
                    _ => self.emit(I::I32Store(mem(0, 2))),
                }
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

    /// Doubles array `a`'s storage when it is full.
    fn grow_if_full(&mut self, a: u32, elem: &Ty) {
        let size = elem_bytes(elem) as i32;
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

    fn new_(&mut self, class: &str, args: &[Expr]) -> R<Ty> {
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
        self.emit(I::If(BlockType::Empty));
        self.leave(n.start);
        self.emit(I::End);
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

    /// `new Response(body)` or `new Response(body, { status })`.
    fn response(&mut self, args: &[Expr]) -> R<Ty> {
        let r = self.local(ValType::I32);
        self.emit(I::I32Const(16));
        self.emit(I::Call(ALLOC));
        self.emit(I::LocalSet(r));
        self.emit(I::LocalGet(r));
        match args.get(1) {
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
                let [(key, status)] = props.as_slice() else {
                    return refuse("Response options other than `{ status }`");
                };
                if key != "status" {
                    return refuse(format!("the Response option `{key}`"));
                }
                self.num(status)?;
            }
            Some(_) => return refuse("Response options that are not an object literal"),
        }
        self.emit(I::F64Store(mem(0, 3)));
        self.emit(I::LocalGet(r));
        match args.first() {
            Some(body) => self.string_of(body)?,
            None => {
                let empty = self.m.str_addr("");
                self.emit(I::I32Const(empty));
            }
        }
        self.emit(I::I32Store(mem(layout::RESP_BODY, 2)));
        if args.len() > 2 {
            return refuse("`new Response` with more than two arguments");
        }
        self.emit(I::LocalGet(r));
        Ok(Ty::Response)
    }

    fn member(&mut self, obj: &Expr, name: &str) -> R<Ty> {
        let t = self.expr(obj)?;
        match (&t, name) {
            (Ty::Str | Ty::U8 | Ty::I32A | Ty::F64A | Ty::Arr(_), "length") => {
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
            _ => refuse(format!("the property `{name}` of a {t:?}")),
        }
    }

    fn array(&mut self, elems: &[Expr]) -> R<Ty> {
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
            let offset = (k as u32 * size) as u64;
            match elem.val() {
                Some(ValType::F64) => self.emit(I::F64Store(mem(offset, 3))),
                _ => self.emit(I::I32Store(mem(offset, 2))),
            }
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

/// A literal: a number (negated or not), a string, a boolean, or an
/// array of literals.
fn constant(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Num(_) | ExprKind::Str(_) | ExprKind::Bool(_) => true,
        ExprKind::Unary(UnOp::Neg, x) => matches!(x.kind, ExprKind::Num(_)),
        ExprKind::Array(elems) => elems.iter().all(constant),
        _ => false,
    }
}

fn elem_bytes(t: &Ty) -> u32 {
    match t.val() {
        Some(ValType::F64) => 8,
        _ => 4,
    }
}
