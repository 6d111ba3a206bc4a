//! The subset of JavaScript the compiler takes, as a tree of its own: what
//! [`lower`](crate::lower) accepts from the parser, what
//! [`instrument`](crate::instrument) marks and [`codegen`](crate::codegen)
//! compiles. Every expression that can be traced has an id, an index into
//! the trace.

/// An expression's place in the trace (`None` for literals and function
/// values, which need no tracing).
pub type TraceId = u32;

#[derive(Debug)]
pub struct Program {
    /// The handler first, then every other function, in source order.
    pub funcs: Vec<Func>,
    /// Module-level `const NAME = literal`.
    pub consts: Vec<(String, Expr)>,
    /// Trace ids handed out: `0..traced`.
    pub traced: u32,
    /// The name of the handler's second parameter, the function's
    /// environment variables (`env.NAME`), if it declares one.
    pub env: Option<String>,
    /// The source range `export default ` that introduces the handler's
    /// object (the instrumented module exports a wrapper instead).
    pub export: (u32, u32),
}

pub type FuncId = usize;

#[derive(Debug)]
pub struct Func {
    pub name: String,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
    /// Where statements can be inserted at the start of the body: just
    /// after its `{`, or, for an arrow's expression body, before it.
    pub body_start: u32,
    /// The body is one expression (an arrow `x => x + 1`).
    pub expression_body: bool,
    /// Declared inside the handler (so it may read the handler's
    /// variables), rather than at the module's top level.
    pub nested: bool,
}

#[derive(Debug)]
pub struct Param {
    pub name: String,
    /// Traced at the function's entry: what callers passed.
    pub id: TraceId,
}

#[derive(Debug)]
pub enum Stmt {
    Let {
        name: String,
        init: Expr,
    },
    /// `const [a, b] = expr` (and `for (const [a, b] of …)`).
    LetArray {
        names: Vec<String>,
        init: Expr,
    },
    Expr(Expr),
    If(Expr, Vec<Stmt>, Vec<Stmt>),
    While(Expr, Vec<Stmt>),
    DoWhile(Vec<Stmt>, Expr),
    For {
        init: Vec<Stmt>,
        test: Option<Expr>,
        update: Option<Expr>,
        body: Vec<Stmt>,
    },
    ForOf {
        /// One name, or the names of an array pattern.
        names: Vec<String>,
        pattern: bool,
        iter: Expr,
        body: Vec<Stmt>,
    },
    Break,
    Continue,
    Return(Option<Expr>),
    Block(Vec<Stmt>),
    /// A function declared here (hoisted to its block's start).
    Func(FuncId),
}

#[derive(Debug)]
pub struct Expr {
    pub id: Option<TraceId>,
    pub start: u32,
    pub end: u32,
    pub kind: ExprKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Lt,
    Le,
    Gt,
    Ge,
    StrictEq,
    StrictNe,
    Eq,
    Ne,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    UShr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Plus,
    Not,
    BitNot,
}

#[derive(Debug)]
pub enum Target {
    Var(String),
    Index(Box<Expr>, Box<Expr>),
    /// `object.name`.
    Member(Box<Expr>, String),
}

#[derive(Debug)]
pub enum ExprKind {
    Num(f64),
    /// A string literal, as UTF-16 code units (JavaScript's strings).
    Str(Vec<u16>),
    Bool(bool),
    Var(String),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `&&` (true) or `||` (false).
    Logic(bool, Box<Expr>, Box<Expr>),
    /// `a ?? b`.
    Coalesce(Box<Expr>, Box<Expr>),
    Unary(UnOp, Box<Expr>),
    Update {
        increment: bool,
        prefix: bool,
        target: Target,
    },
    Assign {
        op: Option<BinOp>,
        target: Target,
        value: Box<Expr>,
    },
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A call of a function by name: one of the program's, or a global
    /// (`String`, `Number`, `parseInt`).
    Call(String, Vec<Expr>),
    /// `object.name(args)`: `Math.floor(x)`, `s.charCodeAt(i)`.
    Method(Box<Expr>, String, Vec<Expr>),
    New(String, Vec<Expr>),
    Member(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Array(Vec<Expr>),
    /// `{ key: value, … }`: static keys that are not array indexes nor
    /// `__proto__`, each once, in source order (JavaScript's property
    /// order for such keys).
    Object(Vec<(String, Expr)>),
    Arrow(FuncId),
    Await(Box<Expr>),
    /// A template literal: `quasis.len() == exprs.len() + 1`.
    Template(Vec<Vec<u16>>, Vec<Expr>),
}
