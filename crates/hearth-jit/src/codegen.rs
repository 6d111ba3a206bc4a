//! [`ir`](crate::ir) plus its [`Trace`] to a WebAssembly module that the
//! wasm tier runs like any function: a WASI command that reads the request
//! body from stdin and writes a CGI response to stdout.
//!
//! Values are typed by what the trace saw, and represented unboxed:
//! numbers are `f64`, booleans `i32`, and strings, typed arrays, arrays
//! and responses are `i32` addresses in linear memory (layouts in
//! [`layout`]), allocated by the runtime's bump pointer, never freed
//! (each invocation has fresh instances). The memory, the heap and the
//! functions for numbers and strings are the runtime's
//! (`crates/hearth-jit-runtime`, imported as [`RUNTIME_NAME`]); the
//! module calls them. Where the code meets something its trace did not
//! (an expression never evaluated, an index out of range), it calls
//! `hearth.leave(at)`, which ends the attempt; the node runs the
//! invocation in the isolate instead.
//!
//! Here: the module (its layout, imports, functions) and
//! statements; expressions are in [`expr`].

use std::collections::{HashMap, HashSet};

use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, DataCountSection, DataSection, EntityType, ExportKind,
    ExportSection, Function, FunctionSection, GlobalSection, GlobalType, ImportSection,
    Instruction as I, MemArg, MemoryType, Module, TypeSection, ValType,
};

mod dynamic;
mod expr;
mod fetch;
mod json;
mod kv;
mod object;

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
    /// Responses: `[status: f64][body: i32][headers: i32]`, the headers
    /// a block of CGI header lines (`[len: i32][bytes]`, in the data).
    pub const RESP_BODY: u64 = 8;
    pub const RESP_HEADERS: u64 = 12;
    include!(concat!(env!("OUT_DIR"), "/runtime_layout.rs"));
    /// Where the module's own part of memory starts: after the runtime's
    /// stack and data ([`RUNTIME_END`]), 8-aligned. The start function
    /// takes it from the runtime's heap and copies the module's data in.
    pub const BASE: u32 = (RUNTIME_END + 7) & !7;
    /// Scratch for WASI and host calls (an iovec and a count, an
    /// answer's length).
    pub const SCRATCH: u32 = BASE;
    /// String literals start here.
    pub const DATA: u32 = BASE + 64;
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
    /// `JSON` (`JSON.stringify`) and `Response` (`Response.json`).
    Json,
    ResponseCtor,
    /// `hearth` and `hearth.kv` (`codegen/kv.rs`).
    Hearth,
    Kv,
    /// `process`, and the function's environment (`env`, `process.env`),
    /// read by name (`codegen/fetch.rs`).
    Process,
    Env,
    /// What `await fetch(…)` answered: `[status: i32][body: i32][len:
    /// i32][read: i32]` (`codegen/fetch.rs`).
    Fetched,
    /// An object or array `JSON.parse` made: the parser's block of
    /// `(key, cell)` pairs or of cells (`codegen/dynamic.rs`).
    DynObj,
    DynArr,
    /// A plain object: its keys in order, each with the kind of value it
    /// holds (`codegen/object.rs`).
    Obj(std::rc::Rc<Vec<(String, Ty)>>),
}

impl Ty {
    fn val(&self) -> Option<ValType> {
        match self {
            Ty::Num => Some(ValType::F64),
            Ty::Undef => None,
            t if t.is_namespace() => None,
            _ => Some(ValType::I32),
        }
    }
    /// A platform object that is only ever named, never held as a value
    /// (`Math`, `hearth.kv`, `env`, …): it has no representation.
    fn is_namespace(&self) -> bool {
        matches!(
            self,
            Ty::Math
                | Ty::StringCtor
                | Ty::DateCtor
                | Ty::Performance
                | Ty::Json
                | Ty::ResponseCtor
                | Ty::Hearth
                | Ty::Kv
                | Ty::Process
                | Ty::Env
        )
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

// Imported functions. Clocks are WASI's, which the wasm tier answers
// from the host layer (so they are taped as the isolate's `Date.now()`
// is; the runtime reads randomness and the environment from WASI the
// same way); KV and outbound HTTP are the wasm tier's `hearth` calls,
// which the isolate's `hearth.kv` and `fetch` make too.
const LEAVE: u32 = 0;
const CLOCK_TIME_GET: u32 = 1;
const KV_GET: u32 = 2;
const KV_SET: u32 = 3;
const HTTP_FETCH: u32 = 4;
const URL_HREF: u32 = 5;
// The runtime's functions (`crates/hearth-jit-runtime`), imported from
// [`RUNTIME_NAME`] in this order (`RUNTIME_FUNCS`).
const RUNTIME_FIRST: u32 = URL_HREF + 1;
pub(crate) const ALLOC: u32 = RUNTIME_FIRST;
pub(crate) const HEAP_SET: u32 = RUNTIME_FIRST + 1;
pub(crate) const TO_INT32: u32 = RUNTIME_FIRST + 2;
pub(crate) const REM: u32 = RUNTIME_FIRST + 3;
pub(crate) const CONCAT: u32 = RUNTIME_FIRST + 4;
pub(crate) const NUM_TO_STR: u32 = RUNTIME_FIRST + 5;
pub(crate) const STR_EQ: u32 = RUNTIME_FIRST + 6;
pub(crate) const READ_BODY: u32 = RUNTIME_FIRST + 7;
pub(crate) const STR_TO_NUM: u32 = RUNTIME_FIRST + 8;
pub(crate) const ASCII_IN: u32 = RUNTIME_FIRST + 9;
pub(crate) const JSON_PARSE: u32 = RUNTIME_FIRST + 10;
pub(crate) const JSON_GET: u32 = RUNTIME_FIRST + 11;
pub(crate) const WRITE_RESPONSE: u32 = RUNTIME_FIRST + 12;
const RANDOM: u32 = RUNTIME_FIRST + 13;
pub(crate) const SB_NEW: u32 = RUNTIME_FIRST + 14;
pub(crate) const SB_PUSH: u32 = RUNTIME_FIRST + 15;
pub(crate) const SB_QUOTE: u32 = RUNTIME_FIRST + 16;
pub(crate) const SB_NUM: u32 = RUNTIME_FIRST + 17;
const ASCII_OUT: u32 = RUNTIME_FIRST + 18;
const ENV_GET: u32 = RUNTIME_FIRST + 19;
// The module's own functions follow.
const FIRST_USER: u32 = RUNTIME_FIRST + RUNTIME_FUNCS.len() as u32;

/// The module compiled code imports its memory and the runtime's
/// functions from; the wasm tier links it (`hearth_wasm`'s libraries).
pub const RUNTIME_NAME: &str = "hearth_rt";

/// The runtime's functions, in the order of their indices (from
/// [`ALLOC`]): name, parameters, results.
const RUNTIME_FUNCS: [(&str, &[ValType], &[ValType]); 20] = {
    use ValType::{F64 as F, I32 as N};
    [
        ("alloc", &[N], &[N]),
        ("heap_set", &[N], &[]),
        ("to_int32", &[F], &[N]),
        ("rem", &[F, F], &[F]),
        ("concat", &[N, N], &[N]),
        ("num_to_str", &[F], &[N]),
        ("str_eq", &[N, N], &[N]),
        ("read_body", &[], &[N]),
        ("str_to_num", &[N], &[F]),
        ("ascii_in", &[N, N], &[N]),
        ("json_parse", &[N], &[N]),
        ("json_get", &[N, N], &[N]),
        ("write_response", &[N], &[]),
        ("random", &[], &[F]),
        ("sb_new", &[], &[N]),
        ("sb_push", &[N, N], &[]),
        ("sb_quote", &[N, N], &[]),
        ("sb_num", &[N, F], &[]),
        ("ascii_out", &[N], &[N]),
        ("env_get", &[N], &[N]),
    ]
};

/// The room a host call's answer (a KV value, a fetched body) is read
/// into: the host's default limit on a KV value. The part an answer does
/// not use is given back at once; a longer one leaves, its answer kept
/// for the isolate (`FnBuilder::take_answer`).
const ANSWER_ROOM: i32 = 1 << 20;

/// WASI's clock ids.
const CLOCK_REALTIME: i32 = 0;
const CLOCK_MONOTONIC: i32 = 1;

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
    /// A number variable that held only int32s when traced, kept as one
    /// in an `i32` local; storing anything else leaves (at the source
    /// offset).
    Int(u32, u32),
    Global(u32, Ty),
    Func(FuncId),
    Const(usize),
    /// The handler's second parameter: the function's environment.
    Env,
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

/// Calls `f` on every expression in `stmts`, outermost first (not into
/// the bodies of functions declared there, which are functions of their
/// own).
fn each_expr<'a>(stmts: &'a [Stmt], f: &mut impl FnMut(&'a Expr)) {
    fn expr<'a>(e: &'a Expr, f: &mut impl FnMut(&'a Expr)) {
        f(e);
        match &e.kind {
            ExprKind::Var(_)
            | ExprKind::Num(_)
            | ExprKind::Str(_)
            | ExprKind::Bool(_)
            | ExprKind::Arrow(_) => {}
            ExprKind::Bin(_, a, b)
            | ExprKind::Logic(_, a, b)
            | ExprKind::Coalesce(a, b)
            | ExprKind::Index(a, b) => {
                expr(a, f);
                expr(b, f);
            }
            ExprKind::Unary(_, a) | ExprKind::Member(a, _) | ExprKind::Await(a) => expr(a, f),
            ExprKind::Update { target, .. } => target_(target, f),
            ExprKind::Assign { target, value, .. } => {
                target_(target, f);
                expr(value, f);
            }
            ExprKind::Cond(a, b, c) => {
                expr(a, f);
                expr(b, f);
                expr(c, f);
            }
            ExprKind::Call(_, args)
            | ExprKind::New(_, args)
            | ExprKind::Array(args)
            | ExprKind::Template(_, args) => args.iter().for_each(|a| expr(a, f)),
            ExprKind::Method(o, _, args) => {
                expr(o, f);
                args.iter().for_each(|a| expr(a, f));
            }
            ExprKind::Object(props) => props.iter().for_each(|(_, v)| expr(v, f)),
        }
    }
    fn target_<'a>(t: &'a Target, f: &mut impl FnMut(&'a Expr)) {
        match t {
            Target::Index(a, b) => {
                expr(a, f);
                expr(b, f);
            }
            Target::Member(a, _) => expr(a, f),
            Target::Var(_) => {}
        }
    }
    fn stmt<'a>(s: &'a Stmt, f: &mut impl FnMut(&'a Expr)) {
        match s {
            Stmt::Let { init, .. } | Stmt::LetArray { init, .. } | Stmt::Expr(init) => {
                expr(init, f)
            }
            Stmt::Return(Some(e)) => expr(e, f),
            Stmt::If(t, a, b) => {
                expr(t, f);
                a.iter().chain(b).for_each(|s| stmt(s, f));
            }
            Stmt::While(t, b) | Stmt::DoWhile(b, t) => {
                expr(t, f);
                b.iter().for_each(|s| stmt(s, f));
            }
            Stmt::For {
                init,
                test,
                update,
                body,
            } => {
                init.iter().chain(body).for_each(|s| stmt(s, f));
                test.iter().chain(update).for_each(|e| expr(e, f));
            }
            Stmt::ForOf { iter, body, .. } => {
                expr(iter, f);
                body.iter().for_each(|s| stmt(s, f));
            }
            Stmt::Block(b) => b.iter().for_each(|s| stmt(s, f)),
            Stmt::Return(None) | Stmt::Break | Stmt::Continue | Stmt::Func(_) => {}
        }
    }
    stmts.iter().for_each(|s| stmt(s, f));
}

/// The names in `body` whose every traced read (and `++`, `--` and
/// assignment, whose values are the variable's) was an int32: such a
/// `let` is kept in an `i32`. Only speed hangs on this: a store of
/// anything else leaves.
fn int_names(body: &[Stmt], trace: &Trace) -> HashSet<String> {
    let mut seen: HashMap<&str, u32> = HashMap::new();
    each_expr(body, &mut |e| {
        let name = match &e.kind {
            ExprKind::Var(n)
            | ExprKind::Update {
                target: Target::Var(n),
                ..
            }
            | ExprKind::Assign {
                target: Target::Var(n),
                ..
            } => n,
            _ => return,
        };
        if let Some(id) = e.id {
            *seen.entry(name).or_default() |= trace.mask(id) & tag::KINDS;
        }
    });
    seen.into_iter()
        .filter(|&(_, mask)| mask == tag::INT)
        .map(|(n, _)| n.to_string())
        .collect()
}

/// The names that functions nested in the handler use: the handler's
/// variables of these names live in globals, which those functions share.
fn captured_names(program: &Program) -> HashSet<String> {
    let mut out = HashSet::new();
    for f in program.funcs.iter().filter(|f| f.nested) {
        each_expr(&f.body, &mut |e| match &e.kind {
            ExprKind::Var(n)
            | ExprKind::Call(n, _)
            | ExprKind::Update {
                target: Target::Var(n),
                ..
            }
            | ExprKind::Assign {
                target: Target::Var(n),
                ..
            } => {
                out.insert(n.clone());
            }
            _ => {}
        });
    }
    out
}

pub(crate) struct ModuleBuilder<'p> {
    program: &'p Program,
    trace: &'p Trace,
    data: Vec<u8>,
    strings: HashMap<Vec<u16>, u32>,
    /// The module's globals, by index (the parser's cursor first).
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

    /// The address of `[len: i32][bytes]`, 4-aligned, in the data segment.
    fn prefixed(&mut self, len: usize, bytes: impl IntoIterator<Item = u8>) -> u32 {
        while !self.data.len().is_multiple_of(4) {
            self.data.push(0);
        }
        let at = layout::DATA + self.data.len() as u32;
        self.data.extend_from_slice(&(len as u32).to_le_bytes());
        self.data.extend(bytes);
        at
    }

    /// The address of a block of bytes with its length (CGI header lines).
    pub(crate) fn blob(&mut self, bytes: &[u8]) -> u32 {
        self.prefixed(bytes.len(), bytes.iter().copied())
    }

    /// The address of a string literal (interned).
    pub(crate) fn string(&mut self, units: &[u16]) -> u32 {
        if let Some(&at) = self.strings.get(units) {
            return at;
        }
        let at = self.prefixed(units.len(), units.iter().flat_map(|u| u.to_le_bytes()));
        self.strings.insert(units.to_vec(), at);
        at
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
        fb.ints = int_names(&f.body, fb.m.trace);
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
        let self_env = self.program.env.clone();
        let mut fb = FnBuilder::new(self, 0, Ty::Response, true);
        fb.outer = outer;
        fb.ints = int_names(&f.body, fb.m.trace);
        let mut scope = HashMap::new();
        if let Some(p) = f.params.first() {
            let l = fb.local(ValType::I32);
            scope.insert(p.name.clone(), Binding::Local(l, Ty::Request));
        }
        if let Some(env) = &self_env {
            scope.insert(env.clone(), Binding::Env);
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
        // Types: imports first.
        let leave = self.type_index(vec![ValType::I32], vec![]);
        let clock = self.type_index(
            vec![ValType::I32, ValType::I64, ValType::I32],
            vec![ValType::I32],
        );
        let kv_get = self.type_index(vec![ValType::I32; 5], vec![ValType::I32]);
        let kv_set = self.type_index(vec![ValType::I32; 4], vec![ValType::I32]);
        let http_fetch = self.type_index(vec![ValType::I32; 11], vec![ValType::I32]);
        let start = self.type_index(vec![], vec![]);
        let runtime: Vec<u32> = RUNTIME_FUNCS
            .iter()
            .map(|(_, p, r)| self.type_index(p.to_vec(), r.to_vec()))
            .collect();
        let mut types = TypeSection::new();
        for (p, r) in &self.types {
            types.ty().function(p.clone(), r.clone());
        }
        module.section(&types);
        let mut imports = ImportSection::new();
        // In the order of their indices (LEAVE … URL_HREF).
        const WASI: &str = "wasi_snapshot_preview1";
        for (module, name, ty) in [
            ("hearth", "leave", leave),
            (WASI, "clock_time_get", clock),
            ("hearth", "kv_get", kv_get),
            ("hearth", "kv_set", kv_set),
            ("hearth", "http_fetch", http_fetch),
            ("hearth", "url_href", kv_get),
        ] {
            imports.import(module, name, EntityType::Function(ty));
        }
        for ((name, _, _), ty) in RUNTIME_FUNCS.iter().zip(runtime) {
            imports.import(RUNTIME_NAME, name, EntityType::Function(ty));
        }
        let data_len = (layout::DATA - layout::BASE) as usize + self.data.len();
        imports.import(
            RUNTIME_NAME,
            "memory",
            EntityType::Memory(MemoryType {
                minimum: 1,
                maximum: None,
                memory64: false,
                shared: false,
                page_size_log2: None,
            }),
        );
        module.section(&imports);
        let mut funcs = FunctionSection::new();
        for ty in &self.func_types {
            funcs.function(*ty);
        }
        let start_index = FIRST_USER + self.func_types.len() as u32;
        funcs.function(start);
        module.section(&funcs);
        let mut globals = GlobalSection::new();
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
        module.section(&DataCountSection { count: 1 });
        let mut code = CodeSection::new();
        for i in FIRST_USER..start_index {
            let (_, body) = self
                .bodies
                .get(&i)
                .ok_or_else(|| Refused::new(format!("internal: function {i} has no body")))?;
            code.function(body);
        }
        // The module's part of memory, taken from the runtime's heap, and
        // its data (zeroed scratch, then literals) copied in; the heap
        // goes on after it.
        let mut s = Function::new([]);
        s.instruction(&I::I32Const(layout::BASE as i32));
        s.instruction(&I::Call(HEAP_SET));
        s.instruction(&I::I32Const(data_len as i32));
        s.instruction(&I::Call(ALLOC));
        s.instruction(&I::I32Const(0));
        s.instruction(&I::I32Const(data_len as i32));
        s.instruction(&I::MemoryInit {
            mem: 0,
            data_index: 0,
        });
        s.instruction(&I::DataDrop(0));
        s.instruction(&I::Call(handler));
        s.instruction(&I::Call(WRITE_RESPONSE));
        s.instruction(&I::End);
        code.function(&s);
        module.section(&code);
        let mut data = DataSection::new();
        let zeroed = (layout::DATA - layout::BASE) as usize;
        let mut bytes = vec![0; zeroed];
        bytes.extend_from_slice(&self.data);
        data.passive(bytes);
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
    /// Names whose every traced read was an int32 (see [`int_names`]).
    ints: HashSet<String>,
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
            ints: HashSet::new(),
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
    pub(crate) fn leave(&mut self, at: u32) {
        self.emit(I::I32Const(at as i32));
        self.emit(I::Call(LEAVE));
        self.emit(I::Unreachable);
    }

    /// `if (cond on stack) leave(at)`.
    pub(crate) fn leave_if(&mut self, at: u32) {
        self.emit(I::If(BlockType::Empty));
        self.leave(at);
        self.emit(I::End);
    }

    /// Leaves at `at` if the address on the stack is 0 (a value that is
    /// not there); keeps the address on the stack otherwise.
    pub(crate) fn leave_if_zero(&mut self, at: u32) {
        let v = self.local(ValType::I32);
        self.emit(I::LocalTee(v));
        self.emit(I::I32Eqz);
        self.leave_if(at);
        self.emit(I::LocalGet(v));
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
        let b = if self.shared(name) {
            self.m.globals.push(v);
            Binding::Global(self.m.globals.len() as u32 - 1, t)
        } else {
            Binding::Local(self.local(v), t)
        };
        self.bind(name, b.clone());
        Ok(b)
    }

    /// Whether a function nested in this one may use the variable `name`
    /// (it then lives in a global).
    fn shared(&self, name: &str) -> bool {
        self.handler && self.m.captured.contains(name)
    }

    /// Names `b` in the innermost scope.
    fn bind(&mut self, name: &str, b: Binding) {
        self.scopes
            .last_mut()
            .expect("a function has a scope")
            .insert(name.to_string(), b);
    }

    fn set(&mut self, b: &Binding) {
        match b {
            Binding::Local(l, _) => self.emit(I::LocalSet(*l)),
            Binding::Int(l, at) => {
                // An int32, and not -0 (which an int32 cannot hold).
                let (x, i) = (self.local(ValType::F64), self.local(ValType::I32));
                self.emit(I::LocalTee(x));
                self.emit(I::I32TruncSatF64S);
                self.emit(I::LocalTee(i));
                self.emit(I::F64ConvertI32S);
                self.emit(I::LocalGet(x));
                self.emit(I::F64Ne);
                self.emit(I::LocalGet(x));
                self.emit(I::I64ReinterpretF64);
                self.emit(I::I64Const(i64::MIN));
                self.emit(I::I64Eq);
                self.emit(I::I32Or);
                self.leave_if(*at);
                self.emit(I::LocalGet(i));
                self.emit(I::LocalSet(*l));
            }
            Binding::Global(g, _) => self.emit(I::GlobalSet(*g)),
            _ => {}
        }
    }

    fn get(&mut self, b: &Binding) {
        match b {
            Binding::Local(l, _) => self.emit(I::LocalGet(*l)),
            Binding::Int(l, _) => {
                self.emit(I::LocalGet(*l));
                self.emit(I::F64ConvertI32S);
            }
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
                // A number variable that held only int32s when traced is
                // kept in an `i32` when its first value is computed in
                // one; stores of other numbers into it pay a guard.
                if self.ints.contains(name) && !self.shared(name) && self.int_shaped(init) {
                    self.int_expr(init);
                    let l = self.local(ValType::I32);
                    self.emit(I::LocalSet(l));
                    self.bind(name, Binding::Int(l, init.start));
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
                let g = self.m.globals.len() as u32 - 1;
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
        self.leave_if(at);
        for (k, name) in names.iter().enumerate() {
            self.emit(I::LocalGet(from));
            self.emit(I::I32Load(mem(layout::ARR_DATA, 2)));
            self.load_at(elem, (k as u32 * elem_bytes(elem)) as u64);
            let b = self.declare(name, (**elem).clone())?;
            self.set(&b);
        }
        Ok(())
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

#[cfg(test)]
mod index_tests {
    use super::*;

    #[test]
    fn each_runtime_index_names_its_import() {
        for (index, name) in [
            (ALLOC, "alloc"),
            (HEAP_SET, "heap_set"),
            (TO_INT32, "to_int32"),
            (REM, "rem"),
            (CONCAT, "concat"),
            (NUM_TO_STR, "num_to_str"),
            (STR_EQ, "str_eq"),
            (READ_BODY, "read_body"),
            (STR_TO_NUM, "str_to_num"),
            (ASCII_IN, "ascii_in"),
            (JSON_PARSE, "json_parse"),
            (JSON_GET, "json_get"),
            (WRITE_RESPONSE, "write_response"),
            (RANDOM, "random"),
            (SB_NEW, "sb_new"),
            (SB_PUSH, "sb_push"),
            (SB_QUOTE, "sb_quote"),
            (SB_NUM, "sb_num"),
            (ASCII_OUT, "ascii_out"),
            (ENV_GET, "env_get"),
        ] {
            assert_eq!(RUNTIME_FUNCS[(index - RUNTIME_FIRST) as usize].0, name);
        }
    }
}
