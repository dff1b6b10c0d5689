//! A grammar-shaped generator of workflow scripts: `arbitrary` builds a
//! tree of JavaScript/TypeScript-ish pieces (statements, expressions,
//! brackets, template literals with substitutions, strings with escapes,
//! comments, regular expressions, type annotations and generics, arrows,
//! `export const meta = {...}` literals, module syntax the preparation
//! must refuse) and `render` prints it. Most outputs parse, so the fuzzer
//! gets past the parser into meta extraction, the type strip and the
//! position mapping; the pieces are also combined wrongly often enough to
//! reach the error paths with deep, realistic structure.

use arbitrary::Arbitrary;

/// Identifiers, including the hooks and names the passes look at.
const IDENTS: &[&str] = &[
    "x",
    "y",
    "a",
    "b",
    "meta",
    "args",
    "agent",
    "parallel",
    "pipeline",
    "phase",
    "log",
    "budget",
    "await",
    "yield",
    "let",
    "async",
    "of",
    "type",
    "as",
    "satisfies",
    "enum",
    "namespace",
    "declare",
    "abstract",
    "readonly",
    "arguments",
    "eval",
    "undefined",
    "\u{3c0}",
    "_$",
    "\u{1d49c}",
    "x\u{200d}y",
];

const KEYWORD_PREFIX: &[&str] = &[
    "await ", "typeof ", "void ", "delete ", "new ", "!", "~", "-", "+", "++", "--", "...",
    "yield ",
];

const BINARY: &[&str] = &[
    " + ",
    " - ",
    " * ",
    " / ",
    " % ",
    " ** ",
    " == ",
    " === ",
    " != ",
    " < ",
    " > ",
    " <= ",
    " >= ",
    " && ",
    " || ",
    " ?? ",
    " & ",
    " | ",
    " ^ ",
    " << ",
    " >> ",
    " >>> ",
    " = ",
    " += ",
    " ??= ",
    " ||= ",
    " instanceof ",
    " in ",
    ", ",
    " as ",
    " satisfies ",
];

const STRING_PIECES: &[&str] = &[
    "a",
    " ",
    "\\n",
    "\\\"",
    "\\'",
    "\\\\",
    "\\u{1F600}",
    "\\u0041",
    "\\x41",
    "\\0",
    "${",
    "`",
    "\u{e9}",
    "\u{1F600}",
    "\u{2028}",
    "\\\n",
    "*/",
    "//",
    "\t",
    "\u{feff}",
];

const TYPES: &[&str] = &[
    "number",
    "string",
    "boolean",
    "unknown",
    "any",
    "never",
    "void",
    "null",
    "undefined",
    "object",
    "Promise",
    "Array",
    "Record",
    "T",
    "U",
    "keyof T",
    "typeof x",
    "readonly string[]",
    "\"lit\"",
    "`t${string}`",
    "1",
    "-1n",
    "unique symbol",
];

#[derive(Debug, Arbitrary)]
pub struct Script {
    pub typescript: bool,
    pub bom: bool,
    pub hashbang: bool,
    pub crlf: bool,
    pub meta: Option<MetaLit>,
    pub meta_first: bool,
    pub body: Vec<Stmt>,
}

/// `export const meta = …`: mostly the right shape, with room to be wrong.
#[derive(Debug, Arbitrary)]
pub struct MetaLit {
    pub keyword: u8,
    pub annotate: bool,
    pub fields: Vec<(MetaKey, Lit)>,
    pub wrap: u8,
}

#[derive(Debug, Arbitrary)]
pub enum MetaKey {
    Name,
    Description,
    WhenToUse,
    Phases,
    Quoted(u8),
    Computed,
    Other(u8),
}

/// A literal as meta may (or may not) contain.
#[derive(Debug, Arbitrary)]
pub enum Lit {
    Str(Str),
    Template(Vec<Piece>),
    Number(i32, u8),
    Neg(u16),
    Bool(bool),
    Null,
    Undefined,
    Array(Vec<Lit>),
    Holey(Vec<Option<Lit>>),
    Object(Vec<(MetaKey, Lit)>),
    Phase(Option<Str>, Option<Str>, Option<Str>),
    Spread(Box<Lit>),
    Shorthand(u8),
    Method,
    Paren(Box<Lit>),
    As(Box<Lit>, u8),
    Ident(u8),
    Call(Box<Lit>),
}

#[derive(Debug, Arbitrary)]
pub struct Str {
    pub double: bool,
    pub pieces: Vec<u8>,
}

#[derive(Debug, Arbitrary)]
pub enum Piece {
    Text(u8),
    Subst(Box<Expr>),
}

#[derive(Debug, Arbitrary)]
pub enum Stmt {
    Expr(Expr),
    Let(u8, u8, Option<Type>, Option<Expr>),
    Return(Option<Expr>),
    If(Expr, Vec<Stmt>, Option<Vec<Stmt>>),
    For(u8, Expr, Vec<Stmt>),
    While(Expr, Vec<Stmt>),
    Block(Vec<Stmt>),
    Function(bool, u8, Vec<(u8, Option<Type>)>, Option<Type>, Vec<Stmt>),
    Class(u8, Vec<ClassMember>),
    TypeAlias(u8, Vec<u8>, Type),
    Interface(u8, Vec<(u8, Type)>),
    Enum(bool, u8, Vec<(u8, Option<Expr>)>),
    Namespace(u8, Vec<Stmt>),
    Try(Vec<Stmt>, Option<Vec<Stmt>>, Option<Vec<Stmt>>),
    Throw(Expr),
    Label(u8, Box<Stmt>),
    Comment(bool, Vec<u8>),
    Module(u8, u8),
    Decorator(u8, Box<Stmt>),
    Raw(u8),
    Empty,
}

#[derive(Debug, Arbitrary)]
pub enum ClassMember {
    Field(u8, Option<Type>, Option<Expr>),
    Method(u8, Vec<Stmt>),
    Ctor(Vec<(bool, u8)>),
    Static(Vec<Stmt>),
}

#[derive(Debug, Arbitrary)]
pub enum Expr {
    Ident(u8),
    Number(u32, u8),
    Str(Str),
    Template(Vec<Piece>),
    Tagged(u8, Vec<Piece>),
    Regex(Vec<u8>, u8),
    Paren(Vec<Expr>),
    Array(Vec<Expr>),
    Object(Vec<(u8, Expr)>),
    Prefix(u8, Box<Expr>),
    Binary(Box<Expr>, u8, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Option<Vec<Type>>, Vec<Expr>),
    Member(Box<Expr>, u8, bool),
    Index(Box<Expr>, Box<Expr>),
    Arrow(bool, Vec<(u8, Option<Type>)>, Option<Type>, ArrowBody),
    Function(bool, Vec<u8>, Vec<Stmt>),
    Agent(Box<Expr>, Option<Box<Expr>>),
    Parallel(Vec<Expr>),
    As(Box<Expr>, Type),
    NonNull(Box<Expr>),
    Generic(Box<Expr>, Vec<Type>),
    Comment(bool, Vec<u8>, Box<Expr>),
    ImportCall(Box<Expr>),
    ImportMeta,
    NewTarget,
    Raw(u8),
}

#[derive(Debug, Arbitrary)]
pub enum ArrowBody {
    Expr(Box<Expr>),
    Block(Vec<Stmt>),
}

#[derive(Debug, Arbitrary)]
pub enum Type {
    Named(u8),
    Generic(u8, Vec<Type>),
    Array(Box<Type>),
    Union(Vec<Type>),
    Object(Vec<(u8, bool, Type)>),
    Function(Vec<Type>, Box<Type>),
    Tuple(Vec<Type>),
    Conditional(Box<Type>, Box<Type>, Box<Type>, Box<Type>),
    Paren(Box<Type>),
}

fn pick<'a>(table: &[&'a str], n: u8) -> &'a str {
    table[usize::from(n) % table.len()]
}

/// Prints a script. `render` is total: every tree prints as some text.
pub fn render(s: &Script) -> String {
    let mut out = String::new();
    if s.bom {
        out.push('\u{feff}');
    }
    if s.hashbang {
        out.push_str("#!/usr/bin/env dsh\n");
    }
    let mut w = Writer {
        out,
        ts: s.typescript,
        depth: 0,
    };
    if s.meta_first
        && let Some(m) = &s.meta
    {
        w.meta(m);
    }
    for st in &s.body {
        w.stmt(st);
    }
    if !s.meta_first
        && let Some(m) = &s.meta
    {
        w.meta(m);
    }
    if s.crlf {
        w.out.replace('\n', "\r\n")
    } else {
        w.out
    }
}

struct Writer {
    out: String,
    ts: bool,
    depth: usize,
}

/// Far deeper than real scripts, below where the generator's own
/// recursion would matter; the nesting bound itself is reached by the
/// `script_bytes` target and by bracket runs (`Raw`).
const MAX_TREE_DEPTH: usize = 200;

impl Writer {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
    }

    fn ident(&mut self, n: u8) {
        let s = pick(IDENTS, n);
        self.push(s);
    }

    fn str_lit(&mut self, s: &Str) {
        let q = if s.double { '"' } else { '\'' };
        self.out.push(q);
        for &p in &s.pieces {
            let piece = pick(STRING_PIECES, p);
            // A raw quote of the same kind or a line break would end it:
            // keep most strings well-formed.
            if piece.starts_with(q) || piece == "\u{2028}" && p % 2 == 0 {
                continue;
            }
            self.push(piece);
        }
        self.out.push(q);
    }

    fn template(&mut self, pieces: &[Piece]) {
        self.push("`");
        for p in pieces {
            match p {
                Piece::Text(t) => {
                    let piece = pick(STRING_PIECES, *t);
                    if piece == "`" || piece == "${" {
                        self.push("\\");
                    }
                    self.push(piece);
                }
                Piece::Subst(e) => {
                    self.push("${");
                    self.expr(e);
                    self.push("}");
                }
            }
        }
        self.push("`");
    }

    fn comment(&mut self, block: bool, text: &[u8]) {
        let body: String = text
            .iter()
            .map(|&b| pick(STRING_PIECES, b))
            .filter(|p| block || !p.contains('\n') && *p != "\u{2028}")
            .filter(|p| !block || *p != "*/")
            .collect();
        if block {
            self.push("/*");
            self.push(&body);
            self.push("*/");
        } else {
            self.push("//");
            self.push(&body);
            self.push("\n");
        }
    }

    fn block(&mut self, body: &[Stmt]) {
        self.push("{\n");
        for s in body {
            self.stmt(s);
        }
        self.push("}");
    }

    fn deeper(&mut self) -> bool {
        if self.depth >= MAX_TREE_DEPTH {
            self.push("0");
            return false;
        }
        self.depth += 1;
        true
    }

    fn stmt(&mut self, s: &Stmt) {
        if !self.deeper() {
            self.push(";\n");
            return;
        }
        match s {
            Stmt::Expr(e) => {
                self.expr(e);
                self.push(";\n");
            }
            Stmt::Let(k, n, ty, init) => {
                self.push(pick(&["const ", "let ", "var ", "using "], *k));
                self.ident(*n);
                if let Some(t) = ty {
                    self.annot(t);
                }
                if let Some(e) = init {
                    self.push(" = ");
                    self.expr(e);
                }
                self.push(";\n");
            }
            Stmt::Return(e) => {
                self.push("return");
                if let Some(e) = e {
                    self.push(" ");
                    self.expr(e);
                }
                self.push(";\n");
            }
            Stmt::If(c, then, other) => {
                self.push("if (");
                self.expr(c);
                self.push(") ");
                self.block(then);
                if let Some(o) = other {
                    self.push(" else ");
                    self.block(o);
                }
                self.push("\n");
            }
            Stmt::For(k, e, body) => {
                match k % 3 {
                    0 => {
                        self.push("for (const x of ");
                        self.expr(e);
                        self.push(") ");
                    }
                    1 => {
                        self.push("for await (const [a, b] of ");
                        self.expr(e);
                        self.push(") ");
                    }
                    _ => {
                        self.push("for (let i = 0; i < ");
                        self.expr(e);
                        self.push("; i++) ");
                    }
                }
                self.block(body);
                self.push("\n");
            }
            Stmt::While(c, body) => {
                self.push("while (");
                self.expr(c);
                self.push(") ");
                self.block(body);
                self.push("\n");
            }
            Stmt::Block(b) => {
                self.block(b);
                self.push("\n");
            }
            Stmt::Function(is_async, n, params, ret, body) => {
                if *is_async {
                    self.push("async ");
                }
                self.push("function ");
                self.ident(*n);
                self.params(params);
                if let Some(t) = ret {
                    self.annot(t);
                }
                self.push(" ");
                self.block(body);
                self.push("\n");
            }
            Stmt::Class(n, members) => {
                self.push("class ");
                self.ident(*n);
                self.push(" {\n");
                for m in members {
                    match m {
                        ClassMember::Field(n, ty, init) => {
                            self.ident(*n);
                            if let Some(t) = ty {
                                self.annot(t);
                            }
                            if let Some(e) = init {
                                self.push(" = ");
                                self.expr(e);
                            }
                            self.push(";\n");
                        }
                        ClassMember::Method(n, body) => {
                            self.ident(*n);
                            self.push("() ");
                            self.block(body);
                            self.push("\n");
                        }
                        ClassMember::Ctor(ps) => {
                            self.push("constructor(");
                            for (i, (prop, n)) in ps.iter().enumerate() {
                                if i > 0 {
                                    self.push(", ");
                                }
                                if *prop && self.ts {
                                    self.push("private readonly ");
                                }
                                self.ident(*n);
                            }
                            self.push(") {}\n");
                        }
                        ClassMember::Static(b) => {
                            self.push("static ");
                            self.block(b);
                            self.push("\n");
                        }
                    }
                }
                self.push("}\n");
            }
            Stmt::TypeAlias(n, params, t) => {
                self.push("type ");
                self.ident(*n);
                if !params.is_empty() {
                    self.push("<");
                    for (i, p) in params.iter().enumerate() {
                        if i > 0 {
                            self.push(", ");
                        }
                        self.push(pick(&["T", "U", "T extends string", "U = number"], *p));
                    }
                    self.push(">");
                }
                self.push(" = ");
                self.ty(t);
                self.push(";\n");
            }
            Stmt::Interface(n, fields) => {
                self.push("interface ");
                self.ident(*n);
                self.push(" {\n");
                for (f, t) in fields {
                    self.ident(*f);
                    self.push(": ");
                    self.ty(t);
                    self.push(";\n");
                }
                self.push("}\n");
            }
            Stmt::Enum(is_const, n, members) => {
                if *is_const {
                    self.push("const ");
                }
                self.push("enum ");
                self.ident(*n);
                self.push(" {\n");
                for (m, init) in members {
                    self.ident(*m);
                    if let Some(e) = init {
                        self.push(" = ");
                        self.expr(e);
                    }
                    self.push(",\n");
                }
                self.push("}\n");
            }
            Stmt::Namespace(n, body) => {
                self.push("namespace ");
                self.ident(*n);
                self.push(" ");
                self.block(body);
                self.push("\n");
            }
            Stmt::Try(body, catch, finally) => {
                self.push("try ");
                self.block(body);
                if let Some(c) = catch {
                    self.push(" catch (e) ");
                    self.block(c);
                }
                if let Some(f) = finally {
                    self.push(" finally ");
                    self.block(f);
                }
                if catch.is_none() && finally.is_none() {
                    self.push(" finally {}");
                }
                self.push("\n");
            }
            Stmt::Throw(e) => {
                self.push("throw ");
                self.expr(e);
                self.push(";\n");
            }
            Stmt::Label(n, s) => {
                self.push("l");
                self.push(&n.to_string());
                self.push(": ");
                self.stmt(s);
            }
            Stmt::Comment(block, text) => {
                self.comment(*block, text);
                self.push("\n");
            }
            Stmt::Module(k, n) => {
                let name = pick(IDENTS, *n).to_string();
                let s = match k % 9 {
                    0 => format!("import {{ {name} }} from \"./m\";\n"),
                    1 => format!("import type {{ {name} }} from \"./m\";\n"),
                    2 => format!("export type {{ {name} }};\n"),
                    3 => format!("export const {name} = 1;\n"),
                    4 => "export default 1;\n".to_string(),
                    5 => format!("export type T{n} = number;\n"),
                    6 => format!("export {{ {name} }};\n"),
                    7 => "import * as ns from \"m\";\n".to_string(),
                    _ => format!("export interface I{n} {{}}\n"),
                };
                self.push(&s);
            }
            Stmt::Decorator(n, s) => {
                self.push("@");
                self.ident(*n);
                self.push("\n");
                self.stmt(s);
            }
            Stmt::Raw(r) => {
                let s = pick(
                    &[
                        "{", "}", "(", ")", "[", "]", "<", ">", "`", "${", "/", "*/", "=>", "?",
                        ";", ",", "\n", "'", "\"", "#", "@", "\\", "<T,>", "?.", "!", "...",
                    ],
                    *r,
                );
                self.push(s);
            }
            Stmt::Empty => self.push(";\n"),
        }
        self.depth -= 1;
    }

    fn params(&mut self, params: &[(u8, Option<Type>)]) {
        self.push("(");
        for (i, (n, t)) in params.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.ident(*n);
            if let Some(t) = t {
                self.annot(t);
            }
        }
        self.push(")");
    }

    fn annot(&mut self, t: &Type) {
        if self.ts {
            self.push(": ");
            self.ty(t);
        }
    }

    fn ty(&mut self, t: &Type) {
        if !self.deeper() {
            return;
        }
        match t {
            Type::Named(n) => {
                let s = pick(TYPES, *n);
                self.push(s);
            }
            Type::Generic(n, args) => {
                let s = pick(TYPES, *n);
                self.push(s);
                self.type_args(args);
            }
            Type::Array(t) => {
                self.ty(t);
                self.push("[]");
            }
            Type::Union(ts) => {
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        self.push(" | ");
                    }
                    self.ty(t);
                }
                if ts.is_empty() {
                    self.push("never");
                }
            }
            Type::Object(fields) => {
                self.push("{ ");
                for (n, opt, t) in fields {
                    self.ident(*n);
                    if *opt {
                        self.push("?");
                    }
                    self.push(": ");
                    self.ty(t);
                    self.push("; ");
                }
                self.push("}");
            }
            Type::Function(ps, r) => {
                self.push("(");
                for (i, p) in ps.iter().enumerate() {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.push(&format!("p{i}: "));
                    self.ty(p);
                }
                self.push(") => ");
                self.ty(r);
            }
            Type::Tuple(ts) => {
                self.push("[");
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.ty(t);
                }
                self.push("]");
            }
            Type::Conditional(a, b, c, d) => {
                self.ty(a);
                self.push(" extends ");
                self.ty(b);
                self.push(" ? ");
                self.ty(c);
                self.push(" : ");
                self.ty(d);
            }
            Type::Paren(t) => {
                self.push("(");
                self.ty(t);
                self.push(")");
            }
        }
        self.depth -= 1;
    }

    fn type_args(&mut self, args: &[Type]) {
        self.push("<");
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.ty(a);
        }
        if args.is_empty() {
            self.push("unknown");
        }
        self.push(">");
    }

    fn expr(&mut self, e: &Expr) {
        if !self.deeper() {
            return;
        }
        match e {
            Expr::Ident(n) => self.ident(*n),
            Expr::Number(n, k) => {
                let s = match k % 8 {
                    0 => n.to_string(),
                    1 => format!("0x{n:x}"),
                    2 => format!("{n}.5e-3"),
                    3 => format!("{n}n"),
                    4 => format!("0b{n:b}"),
                    5 => format!("1_{n}"),
                    6 => format!(".{n}"),
                    _ => format!("0{n}"),
                };
                self.push(&s);
            }
            Expr::Str(s) => self.str_lit(s),
            Expr::Template(ps) => self.template(ps),
            Expr::Tagged(n, ps) => {
                self.ident(*n);
                self.template(ps);
            }
            Expr::Regex(body, flags) => {
                self.push("/");
                for &b in body {
                    self.push(pick(
                        &[
                            "a", "\\/", "[/]", "(", ")", "x*", "\\d", ".", "|", "{2}", "[^]",
                        ],
                        b,
                    ));
                }
                if body.is_empty() {
                    self.push("a");
                }
                self.push("/");
                self.push(pick(&["", "g", "u", "v", "gimsuy", "d"], *flags));
            }
            Expr::Paren(es) => {
                self.push("(");
                self.list(es);
                self.push(")");
            }
            Expr::Array(es) => {
                self.push("[");
                self.list(es);
                self.push("]");
            }
            Expr::Object(fields) => {
                self.push("({ ");
                for (n, v) in fields {
                    self.ident(*n);
                    self.push(": ");
                    self.expr(v);
                    self.push(", ");
                }
                self.push("})");
            }
            Expr::Prefix(op, e) => {
                self.push(pick(KEYWORD_PREFIX, *op));
                self.expr(e);
            }
            Expr::Binary(a, op, b) => {
                self.expr(a);
                self.push(pick(BINARY, *op));
                self.expr(b);
            }
            Expr::Cond(a, b, c) => {
                self.expr(a);
                self.push(" ? ");
                self.expr(b);
                self.push(" : ");
                self.expr(c);
            }
            Expr::Call(f, targs, args) => {
                self.expr(f);
                if let Some(t) = targs
                    && self.ts
                {
                    self.type_args(t);
                }
                self.push("(");
                self.list(args);
                self.push(")");
            }
            Expr::Member(o, n, optional) => {
                self.expr(o);
                self.push(if *optional { "?." } else { "." });
                self.ident(*n);
            }
            Expr::Index(o, i) => {
                self.expr(o);
                self.push("[");
                self.expr(i);
                self.push("]");
            }
            Expr::Arrow(is_async, params, ret, body) => {
                self.push("(");
                if *is_async {
                    self.push("async ");
                }
                self.params(params);
                if let Some(t) = ret {
                    self.annot(t);
                }
                self.push(" => ");
                match body {
                    ArrowBody::Expr(e) => {
                        self.push("(");
                        self.expr(e);
                        self.push(")");
                    }
                    ArrowBody::Block(b) => self.block(b),
                }
                self.push(")");
            }
            Expr::Function(is_async, params, body) => {
                self.push("(");
                if *is_async {
                    self.push("async ");
                }
                self.push("function (");
                for (i, p) in params.iter().enumerate() {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.ident(*p);
                }
                self.push(") ");
                self.block(body);
                self.push(")");
            }
            Expr::Agent(prompt, opts) => {
                self.push("await agent(");
                self.expr(prompt);
                if let Some(o) = opts {
                    self.push(", { label: ");
                    self.expr(o);
                    self.push(", schema: { type: \"object\" } }");
                }
                self.push(")");
            }
            Expr::Parallel(items) => {
                self.push("await parallel([");
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.push("() => ");
                    self.expr(it);
                }
                self.push("])");
            }
            Expr::As(e, t) => {
                self.push("(");
                self.expr(e);
                if self.ts {
                    self.push(" as ");
                    self.ty(t);
                }
                self.push(")");
            }
            Expr::NonNull(e) => {
                self.expr(e);
                if self.ts {
                    self.push("!");
                }
            }
            Expr::Generic(f, ts) => {
                self.expr(f);
                if self.ts {
                    self.type_args(ts);
                }
            }
            Expr::Comment(block, text, e) => {
                self.comment(*block, text);
                self.expr(e);
            }
            Expr::ImportCall(e) => {
                self.push("import(");
                self.expr(e);
                self.push(")");
            }
            Expr::ImportMeta => self.push("import.meta"),
            Expr::NewTarget => self.push("new.target"),
            Expr::Raw(r) => {
                let s = pick(
                    &[
                        "(", ")", "[", "]", "{", "}", "<", ">", "`", "=>", "?", ",", "\n",
                    ],
                    *r,
                );
                self.push(s);
            }
        }
        self.depth -= 1;
    }

    fn list(&mut self, es: &[Expr]) {
        for (i, e) in es.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.expr(e);
        }
    }

    fn meta(&mut self, m: &MetaLit) {
        self.push(pick(
            &[
                "export const meta",
                "export let meta",
                "const meta",
                "export var meta",
                "export const meta2",
            ],
            m.keyword,
        ));
        if m.annotate && self.ts {
            self.push(": Record<string, unknown>");
        }
        self.push(" = ");
        let wrap = m.wrap % 4;
        if wrap == 1 {
            self.push("(");
        }
        self.push("{\n");
        for (k, v) in &m.fields {
            self.meta_field(k, v);
        }
        self.push("}");
        match wrap {
            1 => self.push(")"),
            2 if self.ts => self.push(" as const"),
            3 if self.ts => self.push(" satisfies object"),
            _ => {}
        }
        self.push(";\n");
    }

    fn meta_key(&mut self, k: &MetaKey) {
        match k {
            MetaKey::Name => self.push("name"),
            MetaKey::Description => self.push("description"),
            MetaKey::WhenToUse => self.push("whenToUse"),
            MetaKey::Phases => self.push("phases"),
            MetaKey::Quoted(n) => {
                let s = pick(
                    &[
                        "\"name\"",
                        "'description'",
                        "\"title\"",
                        "\"detail\"",
                        "\"model\"",
                        "\"provider\"",
                        "\"__proto__\"",
                        "\"\u{e9}\"",
                    ],
                    *n,
                );
                self.push(s);
            }
            MetaKey::Computed => self.push("[\"name\"]"),
            MetaKey::Other(n) => {
                let s = pick(
                    &[
                        "title",
                        "detail",
                        "model",
                        "provider",
                        "phase",
                        "0",
                        "1e3",
                        "constructor",
                    ],
                    *n,
                );
                self.push(s);
            }
        }
    }

    fn meta_field(&mut self, k: &MetaKey, v: &Lit) {
        self.meta_key(k);
        self.push(": ");
        self.lit(v);
        self.push(",\n");
    }

    fn lit(&mut self, l: &Lit) {
        if !self.deeper() {
            return;
        }
        match l {
            Lit::Str(s) => self.str_lit(s),
            Lit::Template(ps) => self.template(ps),
            Lit::Number(n, k) => {
                let s = match k % 4 {
                    0 => n.to_string(),
                    1 => format!("{n}.25"),
                    2 => format!("{n}e308"),
                    _ => format!("0x{:x}", n.unsigned_abs()),
                };
                self.push(&s);
            }
            Lit::Neg(n) => {
                self.push("-");
                self.push(&n.to_string());
            }
            Lit::Bool(b) => self.push(if *b { "true" } else { "false" }),
            Lit::Null => self.push("null"),
            Lit::Undefined => self.push("undefined"),
            Lit::Array(items) => {
                self.push("[");
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.lit(it);
                }
                self.push("]");
            }
            Lit::Holey(items) => {
                self.push("[");
                for it in items {
                    if let Some(it) = it {
                        self.lit(it);
                    }
                    self.push(",");
                }
                self.push("]");
            }
            Lit::Object(fields) => {
                self.push("{ ");
                for (k, v) in fields {
                    self.meta_field(k, v);
                }
                self.push("}");
            }
            Lit::Phase(title, detail, model) => {
                self.push("{ ");
                for (key, v) in [("title", title), ("detail", detail), ("model", model)] {
                    if let Some(s) = v {
                        self.push(key);
                        self.push(": ");
                        self.str_lit(s);
                        self.push(", ");
                    }
                }
                self.push("}");
            }
            Lit::Spread(l) => {
                self.push("...");
                self.lit(l);
            }
            Lit::Shorthand(n) => self.ident(*n),
            Lit::Method => self.push("name() { return \"x\"; }"),
            Lit::Paren(l) => {
                self.push("(");
                self.lit(l);
                self.push(")");
            }
            Lit::As(l, t) => {
                self.lit(l);
                if self.ts {
                    self.push(pick(
                        &[
                            " as const",
                            " as string",
                            " satisfies string",
                            " as unknown as string",
                        ],
                        *t,
                    ));
                }
            }
            Lit::Ident(n) => self.ident(*n),
            Lit::Call(l) => {
                self.push("String(");
                self.lit(l);
                self.push(")");
            }
        }
        self.depth -= 1;
    }
}
