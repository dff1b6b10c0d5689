//! Reading a static literal (the value of `export const meta`) from the
//! syntax tree without evaluating anything, and the same tree built from a
//! JSON value.
//!
//! Accepted: object literals with plain keys (identifiers, strings, numbers),
//! array literals, strings, numbers (with an optional leading `-`), booleans,
//! `null` and template literals without substitutions. Parentheses and the
//! TypeScript wrappers `as …`, `satisfies …` and `<T>…` are looked through.

use oxc::ast::ast::{
    ArrayExpression, ArrayExpressionElement, Expression, ObjectExpression, ObjectPropertyKind,
    PropertyKey, PropertyKind, UnaryOperator,
};
use oxc::span::GetSpan;

/// One schema or literal violation; `at` is a byte offset of the file, or
/// `None` for a meta given as JSON. It lives here, below `meta`, because
/// reading a literal already reports them and `meta` builds on the reader.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Violation {
    pub(crate) at: Option<usize>,
    pub(crate) message: String,
}

impl Violation {
    pub(crate) fn at(offset: u32, message: String) -> Violation {
        Violation {
            at: usize::try_from(offset).ok(),
            message,
        }
    }
}

/// A literal value and where it starts (a byte offset; `None` for values
/// that come from JSON).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) at: Option<usize>,
    pub(crate) value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Node>),
    Object(Vec<Property>),
    /// Not a static literal; already reported.
    NotStatic,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Property {
    pub(crate) key: String,
    /// Where the property (its key) starts.
    pub(crate) at: Option<usize>,
    pub(crate) value: Node,
}

impl Value {
    /// How the value is called in messages ("a number", "an array", …).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
            Value::NotStatic => "a non-literal expression",
        }
    }
}

/// `.key` when `key` is an identifier, `["key"]` otherwise.
pub(crate) fn path_segment(key: &str) -> String {
    let mut chars = key.chars();
    let identifier = chars
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$');
    if identifier {
        format!(".{key}")
    } else {
        format!("[{}]", serde_json::Value::String(key.to_string()))
    }
}

fn offset(span: oxc::span::Span) -> Option<usize> {
    usize::try_from(span.start).ok()
}

/// Reads `expr` as a static literal; every part that is not one is reported
/// in `violations` (with `path`, e.g. `meta.phases[0]`) and becomes
/// [`Value::NotStatic`].
pub(crate) fn read(expr: &Expression<'_>, path: &str, violations: &mut Vec<Violation>) -> Node {
    let at = offset(expr.span());
    let value = match expr {
        Expression::ParenthesizedExpression(e) => return read(&e.expression, path, violations),
        Expression::TSAsExpression(e) => return read(&e.expression, path, violations),
        Expression::TSSatisfiesExpression(e) => return read(&e.expression, path, violations),
        Expression::TSTypeAssertion(e) => return read(&e.expression, path, violations),
        Expression::NullLiteral(_) => Value::Null,
        Expression::BooleanLiteral(b) => Value::Bool(b.value),
        Expression::NumericLiteral(n) => Value::Number(n.value),
        Expression::UnaryExpression(u) if u.operator == UnaryOperator::UnaryNegation => {
            match &u.argument {
                Expression::NumericLiteral(n) => Value::Number(-n.value),
                _ => not_static(at, path, "an operator expression", violations),
            }
        }
        Expression::StringLiteral(s) => Value::String(s.value.to_string()),
        Expression::TemplateLiteral(t) if t.expressions.is_empty() => {
            match t.quasis.first().and_then(|q| q.value.cooked.as_ref()) {
                Some(cooked) => Value::String(cooked.to_string()),
                None if t.quasis.is_empty() => Value::String(String::new()),
                None => not_static(
                    at,
                    path,
                    "a template literal with an invalid escape",
                    violations,
                ),
            }
        }
        Expression::ArrayExpression(array) => read_array(array, path, violations),
        Expression::ObjectExpression(object) => read_object(object, path, violations),
        other => {
            let what = describe(other);
            not_static(at, path, &what, violations)
        }
    };
    Node { at, value }
}

/// An array literal's elements, each read at `path[i]`; a spread or an
/// empty slot is a violation.
fn read_array(array: &ArrayExpression<'_>, path: &str, violations: &mut Vec<Violation>) -> Value {
    let mut items = Vec::with_capacity(array.elements.len());
    for (i, element) in array.elements.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        match element {
            ArrayExpressionElement::SpreadElement(s) => {
                violations.push(Violation::at(
                    s.span.start,
                    format!(
                        "{item_path}: spread (`...`) is not allowed in meta; write the elements out"
                    ),
                ));
                items.push(Node {
                    at: offset(s.span),
                    value: Value::NotStatic,
                });
            }
            ArrayExpressionElement::Elision(e) => {
                violations.push(Violation::at(
                    e.span.start,
                    format!("{item_path}: empty array slots are not allowed in meta"),
                ));
                items.push(Node {
                    at: offset(e.span),
                    value: Value::NotStatic,
                });
            }
            _ => match element.as_expression() {
                Some(e) => items.push(read(e, &item_path, violations)),
                None => {
                    let span = element.span();
                    violations.push(Violation::at(
                        span.start,
                        format!("{item_path}: must be a static literal"),
                    ));
                    items.push(Node {
                        at: offset(span),
                        value: Value::NotStatic,
                    });
                }
            },
        }
    }
    Value::Array(items)
}

/// An object literal's properties, each read below `path`; a spread, an
/// accessor, a method, a computed key or a shorthand is a violation.
fn read_object(
    object: &ObjectExpression<'_>,
    path: &str,
    violations: &mut Vec<Violation>,
) -> Value {
    let mut properties = Vec::with_capacity(object.properties.len());
    for property in &object.properties {
        match property {
            ObjectPropertyKind::SpreadProperty(s) => violations.push(Violation::at(
                s.span.start,
                format!("{path}: spread (`...`) is not allowed in meta; write the fields out"),
            )),
            ObjectPropertyKind::ObjectProperty(p) => {
                let key = key_name(&p.key);
                let shown = key.as_deref().map_or_else(
                    || path.to_string(),
                    |k| format!("{path}{}", path_segment(k)),
                );
                let problem = if p.kind != PropertyKind::Init {
                    Some(
                        "getters and setters are not allowed in meta; write `key: value`"
                            .to_string(),
                    )
                } else if p.method {
                    Some("methods are not allowed in meta; write `key: value`".to_string())
                } else if p.computed || key.is_none() {
                    Some(
                        "computed keys are not allowed in meta; write a plain name or string"
                            .to_string(),
                    )
                } else if p.shorthand {
                    let name = key.as_deref().unwrap_or_default();
                    Some(format!(
                        "shorthand properties are not allowed in meta; write `{name}: <literal>`"
                    ))
                } else {
                    None
                };
                match (problem, key) {
                    (None, Some(key)) => {
                        let value = read(&p.value, &shown, violations);
                        properties.push(Property {
                            key,
                            at: offset(p.span),
                            value,
                        });
                    }
                    (problem, key) => {
                        let message = problem.unwrap_or_default();
                        violations.push(Violation::at(p.span.start, format!("{shown}: {message}")));
                        if let Some(key) = key {
                            properties.push(Property {
                                key,
                                at: offset(p.span),
                                value: Node {
                                    at: offset(p.value.span()),
                                    value: Value::NotStatic,
                                },
                            });
                        }
                    }
                }
            }
        }
    }
    Value::Object(properties)
}

fn not_static(at: Option<usize>, path: &str, what: &str, violations: &mut Vec<Violation>) -> Value {
    violations.push(Violation {
        at,
        message: format!("{path}: must be a static literal, found {what}"),
    });
    Value::NotStatic
}

/// The name of a non-computed property key.
fn key_name(key: &PropertyKey<'_>) -> Option<String> {
    match key {
        PropertyKey::StaticIdentifier(id) => Some(id.name.to_string()),
        PropertyKey::StringLiteral(s) => Some(s.value.to_string()),
        PropertyKey::NumericLiteral(n) => Some(number_key(n.value)),
        _ => None,
    }
}

/// The property name JavaScript gives a numeric key (`1` for `1.0`).
fn number_key(n: f64) -> String {
    if n.is_finite() && n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{n:.0}")
    } else {
        n.to_string()
    }
}

fn describe(expr: &Expression<'_>) -> String {
    let what = match expr {
        Expression::Identifier(id) => {
            return format!("the identifier `{}` (variables are not allowed)", id.name);
        }
        Expression::CallExpression(_) => "a function call",
        Expression::NewExpression(_) => "a `new` expression",
        Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_) => "a function",
        Expression::ClassExpression(_) => "a class",
        Expression::TemplateLiteral(_) => "a template literal with `${}` substitutions",
        Expression::TaggedTemplateExpression(_) => "a tagged template",
        Expression::RegExpLiteral(_) => "a regular expression",
        Expression::BigIntLiteral(_) => "a BigInt",
        Expression::AwaitExpression(_) => "an `await` expression",
        Expression::ConditionalExpression(_) => "a conditional expression",
        Expression::BinaryExpression(_)
        | Expression::LogicalExpression(_)
        | Expression::UnaryExpression(_)
        | Expression::UpdateExpression(_)
        | Expression::PrivateInExpression(_) => "an operator expression",
        Expression::AssignmentExpression(_) => "an assignment",
        Expression::SequenceExpression(_) => "a comma expression",
        Expression::ThisExpression(_) => "`this`",
        e if e.is_member_expression() => "a property access",
        _ => "an expression that is not a literal",
    };
    what.to_string()
}

/// The same tree for a JSON value (no positions).
pub(crate) fn from_json(value: &serde_json::Value) -> Node {
    let value = match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Value::String(s.clone()),
        serde_json::Value::Array(items) => Value::Array(items.iter().map(from_json).collect()),
        serde_json::Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| Property {
                    key: key.clone(),
                    at: None,
                    value: from_json(value),
                })
                .collect(),
        ),
    };
    Node { at: None, value }
}
