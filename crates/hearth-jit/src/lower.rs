//! From the parser's tree to [`ir`](crate::ir): the subset the compiler
//! takes (`docs/js-tier.md`, "What compiles"). Anything else is refused
//! with what it was and where, and the function stays in the isolate.

use oxc_allocator::Allocator;
use oxc_ast::ast::{self as js, Expression, Statement};
use oxc_parser::Parser;
use oxc_span::{GetSpan, SourceType, Span};
use oxc_syntax::operator::{
    AssignmentOperator, BinaryOperator, LogicalOperator, UnaryOperator, UpdateOperator,
};

use crate::Refused;
use crate::ir::*;

/// Sources larger than this are not compiled (the parser, the trace and
/// the module all grow with it).
pub const MAX_SOURCE_BYTES: usize = 256 * 1024;
/// Deeper nesting of brackets than this is not compiled: the parser and
/// the compiler recurse once per level.
pub const MAX_NESTING: usize = 128;
/// More traced expressions than this are not compiled: the trace is one
/// log line per invocation, within the log budget.
pub const MAX_TRACED: u32 = 4096;

/// Lowers a module whose default export is `{ fetch(request) { … } }`.
pub fn lower(source: &str) -> Result<Program, Refused> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(Refused::new(format!(
            "the module is {} bytes; the compiler takes at most {MAX_SOURCE_BYTES}",
            source.len()
        )));
    }
    if nesting(source) > MAX_NESTING {
        return Err(Refused::new(format!(
            "brackets nest deeper than {MAX_NESTING}"
        )));
    }
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, source, SourceType::mjs()).parse();
    if parsed.diagnostics.has_errors() || parsed.panicked {
        return Err(Refused::new("the module does not parse".into()));
    }
    let mut l = Lower {
        source,
        funcs: vec![],
        traced: 0,
        in_handler: false,
    };
    // The handler is funcs[0]: reserve it.
    l.funcs.push(Func {
        name: "fetch".into(),
        params: vec![],
        body: vec![],
        body_start: 0,
        expression_body: false,
        nested: false,
    });
    let mut consts = vec![];
    let mut handler = None;
    let mut export = (0, 0);
    for stmt in &parsed.program.body {
        match stmt {
            Statement::FunctionDeclaration(f) => {
                l.function(f, false)?;
            }
            Statement::VariableDeclaration(d) if d.kind == js::VariableDeclarationKind::Const => {
                for decl in &d.declarations {
                    let name = binding_name(&decl.id).ok_or_else(|| l.refuse(decl.span, "a pattern"))?;
                    let init = decl.init.as_ref().ok_or_else(|| l.refuse(decl.span, "a const without a value"))?;
                    let value = l.expr(init)?;
                    if !matches!(value.kind, ExprKind::Num(_) | ExprKind::Str(_) | ExprKind::Bool(_)) {
                        return Err(l.refuse(decl.span, "a module-level const that is not a literal"));
                    }
                    consts.push((name, value));
                }
            }
            Statement::ExportDefaultDeclaration(e) => {
                let js::ExportDefaultDeclarationKind::ObjectExpression(obj) = &e.declaration else {
                    return Err(l.refuse(e.span, "a default export that is not `{ fetch(request) {…} }`"));
                };
                export = (e.span.start, obj.span.start);
                for prop in &obj.properties {
                    let js::ObjectPropertyKind::ObjectProperty(p) = prop else {
                        return Err(l.refuse(obj.span, "a spread in the default export"));
                    };
                    let (js::PropertyKey::StaticIdentifier(key), Expression::FunctionExpression(f)) =
                        (&p.key, &p.value)
                    else {
                        return Err(l.refuse(p.span, "a default export member that is not a method"));
                    };
                    if key.name.as_str() != "fetch" {
                        return Err(l.refuse(p.span, "a default export member other than fetch"));
                    }
                    handler = Some(f);
                }
            }
            other => return Err(l.refuse(other.span(), "a module-level statement other than a function, a literal const or the default export")),
        }
    }
    let f = handler.ok_or_else(|| Refused::new("the module exports no `fetch` handler".into()))?;
    if f.generator {
        return Err(l.refuse(f.span, "a generator handler"));
    }
    // `ctx` may be declared; a use of it is refused at compile time, as
    // any unknown name is.
    let params = &f.params;
    let name_of = |k: usize| -> Result<Option<String>, Refused> {
        params
            .items
            .get(k)
            .map(|p| {
                binding_name(&p.pattern).ok_or_else(|| l.refuse(p.span, "a pattern parameter"))
            })
            .transpose()
    };
    let (request, env) = (name_of(0)?, name_of(1)?);
    let body = f
        .body
        .as_ref()
        .ok_or_else(|| l.refuse(f.span, "a handler without a body"))?;
    l.in_handler = true;
    let stmts = l.stmts(&body.statements)?;
    l.funcs[0] = Func {
        name: "fetch".into(),
        params: request
            .into_iter()
            .map(|name| {
                let id = l.next_id();
                Param { name, id }
            })
            .collect(),
        body: stmts,
        body_start: body.span.start + 1,
        expression_body: false,
        nested: false,
    };
    if l.traced > MAX_TRACED {
        return Err(Refused::new(format!(
            "the module has {} traced expressions; the compiler takes at most {MAX_TRACED}",
            l.traced
        )));
    }
    Ok(Program {
        funcs: l.funcs,
        consts,
        traced: l.traced,
        env,
        export,
    })
}

/// The deepest nesting of `(`, `[` and `{` in `source`, counting brackets
/// in strings and comments too (so it errs towards refusing).
fn nesting(source: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in source.bytes() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fn binding_name(p: &js::BindingPattern<'_>) -> Option<String> {
    match p {
        js::BindingPattern::BindingIdentifier(id) => Some(id.name.as_str().to_string()),
        _ => None,
    }
}

fn utf16(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

struct Lower<'s> {
    source: &'s str,
    funcs: Vec<Func>,
    traced: u32,
    in_handler: bool,
}

impl Lower<'_> {
    fn refuse(&self, span: Span, what: &str) -> Refused {
        let (line, col) = crate::line_col(self.source, span.start);
        Refused::new(format!("{what} at {line}:{col}"))
    }

    fn next_id(&mut self) -> TraceId {
        self.traced += 1;
        self.traced - 1
    }

    fn traced(&mut self, span: Span, kind: ExprKind) -> Expr {
        let id = Some(self.next_id());
        Expr {
            id,
            start: span.start,
            end: span.end,
            kind,
        }
    }

    fn literal(span: Span, kind: ExprKind) -> Expr {
        Expr {
            id: None,
            start: span.start,
            end: span.end,
            kind,
        }
    }

    fn params(&mut self, params: &js::FormalParameters<'_>) -> Result<Vec<Param>, Refused> {
        if params.rest.is_some() {
            return Err(self.refuse(params.span, "a rest parameter"));
        }
        params
            .items
            .iter()
            .map(|p| {
                if p.initializer.is_some() {
                    return Err(self.refuse(p.span, "a default parameter value"));
                }
                let name = binding_name(&p.pattern)
                    .ok_or_else(|| self.refuse(p.span, "a pattern parameter"))?;
                Ok(Param {
                    name,
                    id: self.next_id(),
                })
            })
            .collect()
    }

    /// A function declaration or expression: its id in `funcs`.
    fn function(&mut self, f: &js::Function<'_>, nested: bool) -> Result<FuncId, Refused> {
        if f.r#async || f.generator {
            return Err(self.refuse(f.span, "an async or generator function"));
        }
        let name =
            f.id.as_ref()
                .map_or_else(String::new, |id| id.name.as_str().to_string());
        let params = self.params(&f.params)?;
        let body = f
            .body
            .as_ref()
            .ok_or_else(|| self.refuse(f.span, "a function without a body"))?;
        let id = self.funcs.len();
        self.funcs.push(Func {
            name,
            params,
            body: vec![],
            body_start: body.span.start + 1,
            expression_body: false,
            nested,
        });
        let stmts = self.stmts(&body.statements)?;
        self.funcs[id].body = stmts;
        Ok(id)
    }

    fn arrow(&mut self, a: &js::ArrowFunctionExpression<'_>) -> Result<FuncId, Refused> {
        if a.r#async {
            return Err(self.refuse(a.span, "an async arrow function"));
        }
        let params = self.params(&a.params)?;
        let id = self.funcs.len();
        self.funcs.push(Func {
            name: String::new(),
            params,
            body: vec![],
            body_start: 0,
            expression_body: false,
            nested: self.in_handler,
        });
        let body = match &a.body {
            js::ArrowFunctionBody::FunctionBody(b) => {
                self.funcs[id].body_start = b.span.start + 1;
                self.stmts(&b.statements)?
            }
            other => {
                let e = other
                    .as_expression()
                    .ok_or_else(|| self.refuse(a.span, "an arrow body"))?;
                self.funcs[id].expression_body = true;
                self.funcs[id].body_start = e.span().start;
                vec![Stmt::Return(Some(self.expr(e)?))]
            }
        };
        self.funcs[id].body = body;
        Ok(id)
    }

    fn stmts(&mut self, stmts: &[Statement<'_>]) -> Result<Vec<Stmt>, Refused> {
        let mut out = vec![];
        for s in stmts {
            self.stmt(s, &mut out)?;
        }
        Ok(out)
    }

    fn block(&mut self, s: &Statement<'_>) -> Result<Vec<Stmt>, Refused> {
        let mut out = vec![];
        match s {
            Statement::BlockStatement(b) => {
                for s in &b.body {
                    self.stmt(s, &mut out)?;
                }
            }
            other => self.stmt(other, &mut out)?,
        }
        Ok(out)
    }

    fn declaration(
        &mut self,
        d: &js::VariableDeclaration<'_>,
        out: &mut Vec<Stmt>,
    ) -> Result<(), Refused> {
        if d.kind == js::VariableDeclarationKind::Var {
            return Err(self.refuse(d.span, "`var` (use let or const)"));
        }
        for decl in &d.declarations {
            let init = decl
                .init
                .as_ref()
                .ok_or_else(|| self.refuse(decl.span, "a declaration without a value"))?;
            let init = self.expr(init)?;
            match &decl.id {
                js::BindingPattern::BindingIdentifier(id) => out.push(Stmt::Let {
                    name: id.name.as_str().to_string(),
                    init,
                }),
                js::BindingPattern::ArrayPattern(p) => out.push(Stmt::LetArray {
                    names: self.array_pattern(p)?,
                    init,
                }),
                _ => return Err(self.refuse(decl.span, "an object pattern")),
            }
        }
        Ok(())
    }

    fn array_pattern(&self, p: &js::ArrayPattern<'_>) -> Result<Vec<String>, Refused> {
        if p.rest.is_some() {
            return Err(self.refuse(p.span, "a rest element"));
        }
        p.elements
            .iter()
            .map(|e| {
                e.as_ref()
                    .and_then(binding_name)
                    .ok_or_else(|| self.refuse(p.span, "a hole or nested pattern"))
            })
            .collect()
    }

    fn stmt(&mut self, s: &Statement<'_>, out: &mut Vec<Stmt>) -> Result<(), Refused> {
        let stmt = match s {
            Statement::VariableDeclaration(d) => return self.declaration(d, out),
            Statement::ExpressionStatement(e) => Stmt::Expr(self.expr(&e.expression)?),
            Statement::BlockStatement(b) => Stmt::Block(self.stmts(&b.body)?),
            Statement::EmptyStatement(_) => return Ok(()),
            Statement::IfStatement(i) => Stmt::If(
                self.expr(&i.test)?,
                self.block(&i.consequent)?,
                match &i.alternate {
                    Some(a) => self.block(a)?,
                    None => vec![],
                },
            ),
            Statement::WhileStatement(w) => Stmt::While(self.expr(&w.test)?, self.block(&w.body)?),
            Statement::DoWhileStatement(w) => {
                Stmt::DoWhile(self.block(&w.body)?, self.expr(&w.test)?)
            }
            Statement::ForStatement(f) => {
                let mut init = vec![];
                match &f.init {
                    None => {}
                    Some(js::ForStatementInit::VariableDeclaration(d)) => {
                        self.declaration(d, &mut init)?
                    }
                    Some(e) => {
                        let e = e
                            .as_expression()
                            .ok_or_else(|| self.refuse(f.span, "a for initializer"))?;
                        init.push(Stmt::Expr(self.expr(e)?));
                    }
                }
                Stmt::For {
                    init,
                    test: f.test.as_ref().map(|t| self.expr(t)).transpose()?,
                    update: f.update.as_ref().map(|u| self.expr(u)).transpose()?,
                    body: self.block(&f.body)?,
                }
            }
            Statement::ForOfStatement(f) => {
                if f.r#await {
                    return Err(self.refuse(f.span, "for await"));
                }
                let js::ForStatementLeft::VariableDeclaration(d) = &f.left else {
                    return Err(self.refuse(f.span, "a for-of without a declaration"));
                };
                let [decl] = d.declarations.as_slice() else {
                    return Err(self.refuse(f.span, "a for-of declaring more than one name"));
                };
                let (names, pattern) = match &decl.id {
                    js::BindingPattern::BindingIdentifier(id) => {
                        (vec![id.name.as_str().to_string()], false)
                    }
                    js::BindingPattern::ArrayPattern(p) => (self.array_pattern(p)?, true),
                    _ => return Err(self.refuse(f.span, "an object pattern")),
                };
                Stmt::ForOf {
                    names,
                    pattern,
                    iter: self.expr(&f.right)?,
                    body: self.block(&f.body)?,
                }
            }
            Statement::BreakStatement(b) if b.label.is_none() => Stmt::Break,
            Statement::ContinueStatement(c) if c.label.is_none() => Stmt::Continue,
            Statement::ReturnStatement(r) => {
                Stmt::Return(r.argument.as_ref().map(|e| self.expr(e)).transpose()?)
            }
            Statement::FunctionDeclaration(f) => Stmt::Func(self.function(f, self.in_handler)?),
            other => return Err(self.refuse(other.span(), "this kind of statement")),
        };
        out.push(stmt);
        Ok(())
    }

    fn target(&mut self, t: &js::SimpleAssignmentTarget<'_>) -> Result<Target, Refused> {
        match t {
            js::SimpleAssignmentTarget::AssignmentTargetIdentifier(id) => {
                Ok(Target::Var(id.name.as_str().to_string()))
            }
            js::SimpleAssignmentTarget::ComputedMemberExpression(m) => Ok(Target::Index(
                Box::new(self.expr(&m.object)?),
                Box::new(self.expr(&m.expression)?),
            )),
            js::SimpleAssignmentTarget::StaticMemberExpression(m) if !m.optional => Ok(
                Target::Member(Box::new(self.expr(&m.object)?), m.property.name.to_string()),
            ),
            other => Err(self.refuse(other.span(), "this assignment target")),
        }
    }

    fn args(&mut self, args: &[js::Argument<'_>], span: Span) -> Result<Vec<Expr>, Refused> {
        args.iter()
            .map(|a| {
                let e = a
                    .as_expression()
                    .ok_or_else(|| self.refuse(span, "a spread argument"))?;
                self.expr(e)
            })
            .collect()
    }

    fn expr(&mut self, e: &Expression<'_>) -> Result<Expr, Refused> {
        let span = e.span();
        Ok(match e {
            Expression::ParenthesizedExpression(p) => return self.expr(&p.expression),
            Expression::NumericLiteral(n) => Self::literal(span, ExprKind::Num(n.value)),
            Expression::StringLiteral(s) => {
                Self::literal(span, ExprKind::Str(utf16(s.value.as_str())))
            }
            Expression::BooleanLiteral(b) => Self::literal(span, ExprKind::Bool(b.value)),
            Expression::TemplateLiteral(t) => {
                let quasis = t
                    .quasis
                    .iter()
                    .map(|q| {
                        q.value
                            .cooked
                            .as_ref()
                            .map(|c| utf16(c.as_str()))
                            .ok_or_else(|| self.refuse(span, "an invalid escape in a template"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let exprs = t
                    .expressions
                    .iter()
                    .map(|e| self.expr(e))
                    .collect::<Result<Vec<_>, _>>()?;
                self.traced(span, ExprKind::Template(quasis, exprs))
            }
            Expression::Identifier(id) => {
                let name = id.name.as_str();
                if name == "undefined" {
                    return Err(self.refuse(span, "`undefined`"));
                }
                self.traced(span, ExprKind::Var(name.to_string()))
            }
            Expression::ArrayExpression(a) => {
                let elems = a
                    .elements
                    .iter()
                    .map(|el| {
                        let e = el
                            .as_expression()
                            .ok_or_else(|| self.refuse(span, "a spread or hole in an array"))?;
                        self.expr(e)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                self.traced(span, ExprKind::Array(elems))
            }
            Expression::ObjectExpression(o) => {
                let mut props: Vec<(String, Expr)> = vec![];
                for p in &o.properties {
                    let js::ObjectPropertyKind::ObjectProperty(p) = p else {
                        return Err(self.refuse(span, "a spread in an object"));
                    };
                    let key = match &p.key {
                        js::PropertyKey::StaticIdentifier(key) => key.name.to_string(),
                        js::PropertyKey::StringLiteral(key) => key.value.to_string(),
                        _ => return Err(self.refuse(p.span, "a computed or numeric key")),
                    };
                    if p.method || p.kind != js::PropertyKind::Init {
                        return Err(self.refuse(p.span, "a method or accessor property"));
                    }
                    // Index-like keys come first in JavaScript's property
                    // order, and `__proto__` sets the prototype: neither is
                    // a plain field.
                    if key == "__proto__" || is_array_index(&key) {
                        return Err(self.refuse(p.span, &format!("the key `{key}`")));
                    }
                    if props.iter().any(|(k, _)| *k == key) {
                        return Err(self.refuse(p.span, &format!("the key `{key}` twice")));
                    }
                    let mut value = self.expr(&p.value)?;
                    if p.shorthand {
                        // `{ count }`: the traced source cannot wrap the
                        // name alone; the object's own trace covers it.
                        value.id = None;
                    }
                    props.push((key, value));
                }
                self.traced(span, ExprKind::Object(props))
            }
            Expression::ArrowFunctionExpression(a) => {
                let f = self.arrow(a)?;
                Self::literal(span, ExprKind::Arrow(f))
            }
            Expression::FunctionExpression(f) => {
                let f = self.function(f, self.in_handler)?;
                Self::literal(span, ExprKind::Arrow(f))
            }
            Expression::AwaitExpression(a) => {
                let inner = self.expr(&a.argument)?;
                self.traced(span, ExprKind::Await(Box::new(inner)))
            }
            Expression::BinaryExpression(b) => {
                let op = match b.operator {
                    BinaryOperator::Addition => BinOp::Add,
                    BinaryOperator::Subtraction => BinOp::Sub,
                    BinaryOperator::Multiplication => BinOp::Mul,
                    BinaryOperator::Division => BinOp::Div,
                    BinaryOperator::Remainder => BinOp::Rem,
                    BinaryOperator::LessThan => BinOp::Lt,
                    BinaryOperator::LessEqualThan => BinOp::Le,
                    BinaryOperator::GreaterThan => BinOp::Gt,
                    BinaryOperator::GreaterEqualThan => BinOp::Ge,
                    BinaryOperator::StrictEquality => BinOp::StrictEq,
                    BinaryOperator::StrictInequality => BinOp::StrictNe,
                    BinaryOperator::Equality => BinOp::Eq,
                    BinaryOperator::Inequality => BinOp::Ne,
                    BinaryOperator::BitwiseAnd => BinOp::BitAnd,
                    BinaryOperator::BitwiseOR => BinOp::BitOr,
                    BinaryOperator::BitwiseXOR => BinOp::BitXor,
                    BinaryOperator::ShiftLeft => BinOp::Shl,
                    BinaryOperator::ShiftRight => BinOp::Shr,
                    BinaryOperator::ShiftRightZeroFill => BinOp::UShr,
                    _ => {
                        return Err(
                            self.refuse(span, &format!("the operator `{}`", b.operator.as_str()))
                        );
                    }
                };
                let (l, r) = (self.expr(&b.left)?, self.expr(&b.right)?);
                self.traced(span, ExprKind::Bin(op, Box::new(l), Box::new(r)))
            }
            Expression::LogicalExpression(l) => {
                let (a, b) = (
                    Box::new(self.expr(&l.left)?),
                    Box::new(self.expr(&l.right)?),
                );
                let kind = match l.operator {
                    LogicalOperator::And => ExprKind::Logic(true, a, b),
                    LogicalOperator::Or => ExprKind::Logic(false, a, b),
                    LogicalOperator::Coalesce => ExprKind::Coalesce(a, b),
                };
                self.traced(span, kind)
            }
            Expression::UnaryExpression(u) => {
                let op = match u.operator {
                    UnaryOperator::UnaryNegation => UnOp::Neg,
                    UnaryOperator::UnaryPlus => UnOp::Plus,
                    UnaryOperator::LogicalNot => UnOp::Not,
                    UnaryOperator::BitwiseNot => UnOp::BitNot,
                    _ => {
                        return Err(
                            self.refuse(span, &format!("the operator `{}`", u.operator.as_str()))
                        );
                    }
                };
                let inner = self.expr(&u.argument)?;
                self.traced(span, ExprKind::Unary(op, Box::new(inner)))
            }
            Expression::UpdateExpression(u) => {
                let target = self.target(&u.argument)?;
                self.traced(
                    span,
                    ExprKind::Update {
                        increment: u.operator == UpdateOperator::Increment,
                        prefix: u.prefix,
                        target,
                    },
                )
            }
            Expression::AssignmentExpression(a) => {
                let op = match a.operator {
                    AssignmentOperator::Assign => None,
                    AssignmentOperator::Addition => Some(BinOp::Add),
                    AssignmentOperator::Subtraction => Some(BinOp::Sub),
                    AssignmentOperator::Multiplication => Some(BinOp::Mul),
                    AssignmentOperator::Division => Some(BinOp::Div),
                    AssignmentOperator::Remainder => Some(BinOp::Rem),
                    AssignmentOperator::BitwiseAnd => Some(BinOp::BitAnd),
                    AssignmentOperator::BitwiseOR => Some(BinOp::BitOr),
                    AssignmentOperator::BitwiseXOR => Some(BinOp::BitXor),
                    AssignmentOperator::ShiftLeft => Some(BinOp::Shl),
                    AssignmentOperator::ShiftRight => Some(BinOp::Shr),
                    AssignmentOperator::ShiftRightZeroFill => Some(BinOp::UShr),
                    _ => {
                        return Err(
                            self.refuse(span, &format!("the operator `{}`", a.operator.as_str()))
                        );
                    }
                };
                let target = a
                    .left
                    .as_simple_assignment_target()
                    .ok_or_else(|| self.refuse(span, "a destructuring assignment"))?;
                let target = self.target(target)?;
                let value = self.expr(&a.right)?;
                self.traced(
                    span,
                    ExprKind::Assign {
                        op,
                        target,
                        value: Box::new(value),
                    },
                )
            }
            Expression::ConditionalExpression(c) => {
                let (t, a, b) = (
                    self.expr(&c.test)?,
                    self.expr(&c.consequent)?,
                    self.expr(&c.alternate)?,
                );
                self.traced(span, ExprKind::Cond(Box::new(t), Box::new(a), Box::new(b)))
            }
            Expression::CallExpression(c) => {
                if c.optional {
                    return Err(self.refuse(span, "an optional call"));
                }
                match c.callee.without_parentheses() {
                    Expression::Identifier(id) => {
                        let args = self.args(&c.arguments, span)?;
                        self.traced(span, ExprKind::Call(id.name.as_str().to_string(), args))
                    }
                    Expression::StaticMemberExpression(m) if !m.optional => {
                        let obj = self.expr(&m.object)?;
                        let args = self.args(&c.arguments, span)?;
                        self.traced(
                            span,
                            ExprKind::Method(
                                Box::new(obj),
                                m.property.name.as_str().to_string(),
                                args,
                            ),
                        )
                    }
                    _ => {
                        return Err(
                            self.refuse(span, "a call of something other than a name or a method")
                        );
                    }
                }
            }
            Expression::NewExpression(n) => {
                let Expression::Identifier(class) = &n.callee else {
                    return Err(self.refuse(span, "`new` of something other than a name"));
                };
                let args = self.args(&n.arguments, span)?;
                self.traced(span, ExprKind::New(class.name.as_str().to_string(), args))
            }
            Expression::StaticMemberExpression(m) if !m.optional => {
                let obj = self.expr(&m.object)?;
                self.traced(
                    span,
                    ExprKind::Member(Box::new(obj), m.property.name.as_str().to_string()),
                )
            }
            Expression::ComputedMemberExpression(m) if !m.optional => {
                let (obj, idx) = (self.expr(&m.object)?, self.expr(&m.expression)?);
                self.traced(span, ExprKind::Index(Box::new(obj), Box::new(idx)))
            }
            _ => return Err(self.refuse(span, "this kind of expression")),
        })
    }
}

/// A key JavaScript orders as an array index (`"0"`, `"12"`, not `"01"`).
fn is_array_index(key: &str) -> bool {
    key.parse::<u32>()
        .is_ok_and(|n| n != u32::MAX && n.to_string() == key)
}
