//! `export const meta`: finding the declaration, reading its literal,
//! validating it against the meta schema and removing it from the body.

use std::collections::HashSet;

use oxc::ast::ast::{
    BindingPattern, Declaration, Program, Statement, VariableDeclaration, VariableDeclarationKind,
};

use super::diagnostic::Located;
use super::literal::{self, Node, Property, Value, Violation, path_segment};
use super::{Meta, PhaseMeta};

const META_FIELDS: &str = "name, description, whenToUse, phases";
const PHASE_FIELDS: &str = "title, detail, model, provider";

/// Whether `decl` is the (possibly malformed) meta declaration: a non-ambient
/// variable declaration binding the plain name `meta`.
pub(crate) fn is_meta_declaration(decl: &Declaration<'_>) -> bool {
    match decl {
        Declaration::VariableDeclaration(var) => !var.declare && declares_meta(var),
        _ => false,
    }
}

fn declares_meta(var: &VariableDeclaration<'_>) -> bool {
    var.declarations.iter().any(|d| is_meta_binding(&d.id))
}

fn is_meta_binding(id: &BindingPattern<'_>) -> bool {
    matches!(id, BindingPattern::BindingIdentifier(id) if id.name == "meta")
}

fn meta_declaration<'s, 'a>(statement: &'s Statement<'a>) -> Option<&'s VariableDeclaration<'a>> {
    match statement {
        Statement::ExportDeclaration(export) => match &export.declaration {
            Declaration::VariableDeclaration(var) if !var.declare && declares_meta(var) => {
                Some(var)
            }
            _ => None,
        },
        _ => None,
    }
}

/// What [`extract`] found: the meta (`None` when there is none) and what
/// was accepted with a warning.
pub(crate) type Extracted = (Option<Meta>, Vec<Located>);

/// Reads and validates the meta of `program` and removes every meta
/// statement from its body. `Ok((None, _))` when there is no meta.
pub(crate) fn extract(program: &mut Program<'_>) -> Result<Extracted, Vec<Located>> {
    let mut violations = Vec::new();
    let mut warnings = Vec::new();
    let mut meta = None;
    let mut seen = false;
    // Claude Code refuses a script whose meta is not its first statement;
    // only what erases to nothing (types, `import type`) may come first.
    let mut code_before = false;
    for statement in &program.body {
        let Some(var) = meta_declaration(statement) else {
            code_before |= !erases_to_nothing(statement);
            continue;
        };
        let statement_start = statement_offset(statement);
        if !seen && code_before {
            violations.push(Violation {
                at: statement_start,
                message: "meta: `export const meta = {...}` must be the first statement of the \
                          script (Claude Code refuses the script otherwise); move it to the top, \
                          above the code before it"
                    .to_string(),
            });
        }
        if seen {
            violations.push(Violation {
                at: statement_start,
                message:
                    "meta: declared more than once; a workflow has a single `export const meta`"
                        .to_string(),
            });
            continue;
        }
        seen = true;
        if var.kind != VariableDeclarationKind::Const {
            violations.push(Violation::at(
                var.span.start,
                format!(
                    "meta: must be declared with `export const meta = {{...}}`, not `{}`",
                    var.kind.as_str()
                ),
            ));
        }
        if let Some(other) = var.declarations.iter().find(|d| !is_meta_binding(&d.id)) {
            violations.push(Violation::at(
                other.span.start,
                "meta: `export const meta` must declare nothing but meta (found several declarators)".to_string(),
            ));
        }
        let Some(declarator) = var.declarations.iter().find(|d| is_meta_binding(&d.id)) else {
            continue;
        };
        match &declarator.init {
            None => violations.push(Violation::at(
                declarator.span.start,
                "meta: needs a value, a static object literal `{ name, description, ... }`"
                    .to_string(),
            )),
            Some(init) => {
                let node = literal::read(init, "meta", &mut violations);
                meta = validate(&node, &mut violations, &mut warnings);
            }
        }
    }
    program.body.retain(|s| meta_declaration(s).is_none());
    if violations.is_empty() {
        let located = |v: Violation| Located {
            offset: v.at.unwrap_or(0),
            message: v.message,
        };
        Ok((meta, warnings.into_iter().map(located).collect()))
    } else {
        Err(violations
            .into_iter()
            .map(|v| Located {
                offset: v.at.unwrap_or(0),
                message: v.message,
            })
            .collect())
    }
}

/// A statement TypeScript erasure removes, or one that does nothing: it
/// may stand before the meta.
fn erases_to_nothing(statement: &Statement<'_>) -> bool {
    match statement {
        Statement::EmptyStatement(_)
        | Statement::TSTypeAliasDeclaration(_)
        | Statement::TSInterfaceDeclaration(_) => true,
        Statement::ImportDeclaration(decl) => decl.import_kind.is_type(),
        Statement::ExportNamedDeclaration(decl) => decl.export_kind.is_type(),
        _ => false,
    }
}

fn statement_offset(statement: &Statement<'_>) -> Option<usize> {
    use oxc::span::GetSpan;
    usize::try_from(statement.span().start).ok()
}

/// See [`super::validate_meta_json`].
pub(crate) fn validate_json(value: &serde_json::Value) -> Result<Meta, Vec<String>> {
    let mut violations = Vec::new();
    let node = literal::from_json(value);
    // The same rules as a file's meta; what that one carries with a
    // warning is left out here (there is no run to say it in yet).
    let mut warnings = Vec::new();
    let meta = validate(&node, &mut violations, &mut warnings);
    match meta {
        Some(meta) if violations.is_empty() => Ok(meta),
        _ => Err(violations.into_iter().map(|v| v.message).collect()),
    }
}

/// Validates a literal against the meta schema, reporting every violation.
/// Returns the meta only when nothing was reported.
///
/// Claude Code refuses a meta only for its `name` and `description` (each
/// a non-empty string); whatever else it carries is accepted (issue 33 §3,
/// observed with `../shared/ccref`). So is it here, with a warning each:
/// an unknown field (`examples`, `version`) is ignored, a field given twice
/// takes its last value (as the JavaScript object does), and a
/// `whenToUse`, `phases` entry or phase field of the wrong shape is left
/// out.
pub(crate) fn validate(
    root: &Node,
    violations: &mut Vec<Violation>,
    warnings: &mut Vec<Violation>,
) -> Option<Meta> {
    let before = violations.len();
    let properties = match &root.value {
        Value::Object(properties) => properties,
        Value::NotStatic => return None,
        other => {
            violations.push(Violation {
                at: root.at,
                message: format!(
                    "meta: must be an object `{{ name, description, ... }}`, found {}",
                    other.kind()
                ),
            });
            return None;
        }
    };
    let mut name = None;
    let mut description = None;
    let mut when_to_use = None;
    let mut phases = None;
    for property in last_of_each(properties, "meta", warnings) {
        let path = format!("meta{}", path_segment(&property.key));
        match property.key.as_str() {
            "name" => name = Some(non_empty_string(property, &path, violations)),
            "description" => description = Some(non_empty_string(property, &path, violations)),
            "whenToUse" => when_to_use = Some(string(property, &path, warnings)),
            "phases" => phases = Some(read_phases(property, &path, warnings)),
            _ => warnings.push(Violation {
                at: property.at,
                message: format!(
                    "{path}: unknown field, ignored as Claude Code ignores it (dsh reads \
                     {META_FIELDS})"
                ),
            }),
        }
    }
    let name = required(name, root, "meta.name", violations);
    let description = required(description, root, "meta.description", violations);
    if violations.len() != before {
        return None;
    }
    Some(Meta {
        name: name??,
        description: description??,
        when_to_use: when_to_use.flatten(),
        phases: phases.flatten(),
    })
}

/// The properties of an object, the last occurrence of each key only (the
/// one the JavaScript object keeps), in the order of first occurrence;
/// each earlier duplicate gets a warning.
fn last_of_each<'p>(
    properties: &'p [Property],
    path: &str,
    warnings: &mut Vec<Violation>,
) -> Vec<&'p Property> {
    let mut seen = HashSet::new();
    let mut out: Vec<&Property> = Vec::with_capacity(properties.len());
    for property in properties {
        if seen.insert(property.key.as_str()) {
            out.push(property);
        } else if let Some(slot) = out.iter_mut().find(|p| p.key == property.key) {
            warnings.push(Violation {
                at: slot.at,
                message: format!(
                    "{path}{}: given more than once; the last value is used, as in JavaScript",
                    path_segment(&property.key)
                ),
            });
            *slot = property;
        }
    }
    out
}

/// A required field: reports it at the object when absent.
fn required<T>(
    field: Option<Option<T>>,
    object: &Node,
    path: &str,
    violations: &mut Vec<Violation>,
) -> Option<Option<T>> {
    if field.is_none() {
        violations.push(Violation {
            at: object.at,
            message: format!("{path}: is required (a non-empty string)"),
        });
    }
    field
}

fn non_empty_string(
    property: &Property,
    path: &str,
    violations: &mut Vec<Violation>,
) -> Option<String> {
    match &property.value.value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::NotStatic => None,
        _ => {
            violations.push(Violation {
                at: property.at,
                message: format!("{path}: must be a non-empty string"),
            });
            None
        }
    }
}

/// An optional string field; one of another type is left out with a warning.
fn string(property: &Property, path: &str, warnings: &mut Vec<Violation>) -> Option<String> {
    match &property.value.value {
        Value::String(s) => Some(s.clone()),
        Value::NotStatic => None,
        other => {
            warnings.push(Violation {
                at: property.at,
                message: format!(
                    "{path}: should be a string, found {}; left out, as Claude Code ignores it",
                    other.kind()
                ),
            });
            None
        }
    }
}

/// `meta.phases`: its entries that are `{ title, … }` with a non-empty
/// title; anything else is left out with a warning (Claude Code reads no
/// further than name and description).
fn read_phases(
    property: &Property,
    path: &str,
    warnings: &mut Vec<Violation>,
) -> Option<Vec<PhaseMeta>> {
    let items = match &property.value.value {
        Value::Array(items) => items,
        Value::NotStatic => return None,
        other => {
            warnings.push(Violation {
                at: property.at,
                message: format!(
                    "{path}: should be an array of {{ title, detail?, model?, provider? }}, found \
                     {}; left out, as Claude Code ignores it",
                    other.kind()
                ),
            });
            return None;
        }
    };
    Some(
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| read_phase(item, &format!("{path}[{i}]"), warnings))
            .collect(),
    )
}

fn read_phase(node: &Node, path: &str, warnings: &mut Vec<Violation>) -> Option<PhaseMeta> {
    let left_out = |warnings: &mut Vec<Violation>, what: String| {
        warnings.push(Violation {
            at: node.at,
            message: format!("{path}: {what}; this phase is left out, as Claude Code ignores it"),
        });
    };
    let properties = match &node.value {
        Value::Object(properties) => properties,
        Value::NotStatic => return None,
        other => {
            left_out(
                warnings,
                format!(
                    "should be an object {{ title, detail?, model?, provider? }}, found {}",
                    other.kind()
                ),
            );
            return None;
        }
    };
    let mut title = None;
    let mut detail = None;
    let mut model = None;
    let mut provider = None;
    for property in last_of_each(properties, path, warnings) {
        let field_path = format!("{path}{}", path_segment(&property.key));
        match property.key.as_str() {
            "title" => title = Some(&property.value.value),
            "detail" => detail = string(property, &field_path, warnings),
            "model" => model = string(property, &field_path, warnings),
            "provider" => provider = string(property, &field_path, warnings),
            _ => warnings.push(Violation {
                at: property.at,
                message: format!(
                    "{field_path}: unknown field, ignored as Claude Code ignores it (dsh reads \
                     {PHASE_FIELDS})"
                ),
            }),
        }
    }
    let title = match title {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        Some(Value::NotStatic) => return None,
        Some(Value::String(_)) => {
            left_out(warnings, "its title is empty".to_string());
            return None;
        }
        Some(other) => {
            left_out(
                warnings,
                format!(
                    "its title should be a non-empty string, found {}",
                    other.kind()
                ),
            );
            return None;
        }
        None => {
            left_out(warnings, "it has no title".to_string());
            return None;
        }
    };
    Some(PhaseMeta {
        title,
        detail,
        model,
        provider,
    })
}
