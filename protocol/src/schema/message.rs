//! The words of a violation: the `jsonschema` crate's errors as a dsh path
//! and a short message a model or a human can act on. Shared by the check
//! (meta-schema errors) and the validation, so it sits below both.

use jsonschema::JsonType;
use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::Value;

use super::*;

// Long because: one arm per kind of error the crate reports, each its own sentence.
/// The message for one error; `prefix` is the path its instance paths are
/// under (used to place the reasons of `oneOf`/`anyOf` branches).
pub(super) fn message(error: &ValidationError<'_>, prefix: &str) -> String {
    let instance: &Value = error.instance();
    match error.kind() {
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(ty) => type_name(*ty).to_owned(),
                TypeKind::Multiple(set) => {
                    set.iter().map(type_name).collect::<Vec<_>>().join(" or ")
                }
            };
            match instance {
                // "expected integer, got number" would read as nonsense for 1.5.
                Value::Number(_) if expected == "integer" => {
                    format!("expected integer, got {}", snippet(instance))
                }
                _ => format!("expected {expected}, got {}", super::kind(instance)),
            }
        }
        ValidationErrorKind::Required { property } => match property {
            Value::String(name) => format!("missing required property {}", quote(name)),
            other => format!("missing required property {}", snippet(other)),
        },
        ValidationErrorKind::Enum { options } => match &**options {
            Value::Array(allowed) => format!(
                "must be one of {}",
                elided_list(allowed.iter().map(snippet))
            ),
            other => format!("must be one of {}", snippet(other)),
        },
        ValidationErrorKind::Constant { expected_value } => {
            format!("must equal {}", snippet(expected_value))
        }
        ValidationErrorKind::MinLength { limit } => format!(
            "must be at least {limit} characters long, got {}",
            char_count(instance)
        ),
        ValidationErrorKind::MaxLength { limit } => format!(
            "must be at most {limit} characters long, got {}",
            char_count(instance)
        ),
        ValidationErrorKind::MinItems { limit } => {
            format!("must have at least {limit} items, got {}", len(instance))
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!("must have at most {limit} items, got {}", len(instance))
        }
        ValidationErrorKind::MinProperties { limit } => format!(
            "must have at least {limit} properties, got {}",
            len(instance)
        ),
        ValidationErrorKind::MaxProperties { limit } => format!(
            "must have at most {limit} properties, got {}",
            len(instance)
        ),
        ValidationErrorKind::Minimum { limit } => {
            format!("must be >= {}, got {}", snippet(limit), snippet(instance))
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("must be <= {}, got {}", snippet(limit), snippet(instance))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("must be > {}, got {}", snippet(limit), snippet(instance))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("must be < {}, got {}", snippet(limit), snippet(instance))
        }
        ValidationErrorKind::MultipleOf { multiple_of } => {
            format!(
                "must be a multiple of {multiple_of}, got {}",
                snippet(instance)
            )
        }
        ValidationErrorKind::Pattern { pattern } => {
            format!("must match the pattern {}", quote(pattern))
        }
        ValidationErrorKind::Format { format } => {
            format!(
                "must be a valid {} (format), got {}",
                quote(format),
                snippet(instance)
            )
        }
        ValidationErrorKind::UniqueItems => "items must be unique".to_owned(),
        ValidationErrorKind::Contains => {
            "must contain an item matching the \"contains\" schema".to_owned()
        }
        ValidationErrorKind::Not { schema } => {
            format!("must not match the \"not\" schema {}", snippet(schema))
        }
        ValidationErrorKind::FalseSchema => "no value is allowed here".to_owned(),
        ValidationErrorKind::AdditionalItems { limit } => {
            format!("must have at most {limit} items (\"additionalItems\": false)")
        }
        ValidationErrorKind::PropertyNames { error } => {
            format!(
                "property name {}: {}",
                snippet(error.instance()),
                message(error, prefix)
            )
        }
        ValidationErrorKind::OneOfNotValid { context } => format!(
            "matches none of the {} oneOf branches ({})",
            context.len(),
            branch_reasons(
                context,
                &pointer_path(prefix, error.instance_path()),
                prefix
            )
        ),
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            "matches more than one oneOf branch; exactly one must match".to_owned()
        }
        ValidationErrorKind::AnyOf { context } => format!(
            "matches none of the {} anyOf branches ({})",
            context.len(),
            branch_reasons(
                context,
                &pointer_path(prefix, error.instance_path()),
                prefix
            )
        ),
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => format!(
            "unexpected properties: {}",
            elided_list(unexpected.iter().map(|k| quote(k)))
        ),
        _ => cut(&error.to_string()),
    }
}

/// Each failing branch's first complaint, since "matches none" alone gives
/// a model (or a human) nothing to correct.
fn branch_reasons(context: &[Vec<ValidationError<'static>>], at: &str, prefix: &str) -> String {
    let reasons: Vec<String> = context
        .iter()
        .enumerate()
        .filter_map(|(i, errors)| {
            let first = errors.first()?;
            let full = pointer_path(prefix, first.instance_path());
            let msg = message(first, prefix);
            Some(if full == at {
                format!("branch {i}: {msg}")
            } else {
                format!("branch {i} at {full}: {msg}")
            })
        })
        .collect();
    reasons.join("; ")
}

/// The JSON pointer of a keyword's schema object.
pub(super) fn parent(keyword_pointer: &str) -> &str {
    keyword_pointer
        .rfind('/')
        .map_or("", |i| &keyword_pointer[..i])
}

fn type_name(ty: JsonType) -> &'static str {
    match ty {
        JsonType::Array => "array",
        JsonType::Boolean => "boolean",
        JsonType::Integer => "integer",
        JsonType::Null => "null",
        JsonType::Number => "number",
        JsonType::Object => "object",
        JsonType::String => "string",
    }
}

fn char_count(value: &Value) -> usize {
    value.as_str().map_or(0, |s| s.chars().count())
}

fn len(value: &Value) -> usize {
    match value {
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => 0,
    }
}

/// A message from the crate, cut so an enormous value in it cannot bloat a
/// violation.
fn cut(text: &str) -> String {
    const LIMIT: usize = 200;
    if text.chars().count() > LIMIT {
        let mut short: String = text.chars().take(LIMIT - 1).collect();
        short.push('…');
        short
    } else {
        text.to_owned()
    }
}

/// A JSON pointer into a value or schema, as a dsh path under `prefix`
/// (`/items/2/name` gives `value.items[2].name`).
pub(super) fn pointer_path(prefix: &str, location: &jsonschema::paths::Location) -> String {
    let mut at = prefix.to_owned();
    for seg in location.iter() {
        at = match seg {
            jsonschema::paths::LocationSegment::Property(name) => member(&at, &name),
            jsonschema::paths::LocationSegment::Index(i) => index(&at, i),
        };
    }
    at
}
