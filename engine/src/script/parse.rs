//! Parsing with oxc and the early (semantic) syntax checks.

use oxc::allocator::Allocator;
use oxc::ast::ast::Program;
use oxc::diagnostics::{OxcDiagnostic, Severity};
use oxc::parser::{ParseOptions, Parser};
use oxc::semantic::{Scoping, SemanticBuilder};
use oxc::span::SourceType;

use super::ScriptKind;

/// The oxc source type of a workflow file: always a module (so `import` and
/// `export` are recognised and top-level `await` parses), TypeScript only for
/// TypeScript files, never JSX.
pub(crate) fn source_type(kind: ScriptKind) -> SourceType {
    match kind {
        ScriptKind::TypeScript => SourceType::ts().with_module(true),
        ScriptKind::JavaScript => SourceType::mjs(),
    }
}

/// Parses `source`; top-level `return` is allowed. Any parser error fails.
pub(crate) fn parse<'a>(
    allocator: &'a Allocator,
    source: &'a str,
    kind: ScriptKind,
) -> Result<Program<'a>, Vec<OxcDiagnostic>> {
    let options = ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    };
    let ret = Parser::new(allocator, source, source_type(kind))
        .with_options(options)
        .parse();
    let mut errors: Vec<OxcDiagnostic> = errors_only(ret.diagnostics);
    if !errors.is_empty() {
        if kind == ScriptKind::JavaScript
            && parses_as_typescript(source)
            && let Some(first) = errors.first_mut()
        {
            first.message = format!(
                "{} (this looks like TypeScript, which only .ts/.mts files may use)",
                first.message
            )
            .into();
        }
        return Err(errors);
    }
    if ret.panicked {
        return Err(vec![OxcDiagnostic::error(
            "the parser gave up on this file",
        )]);
    }
    Ok(ret.program)
}

/// Whether a JavaScript file that failed to parse would parse as TypeScript.
fn parses_as_typescript(source: &str) -> bool {
    let allocator = Allocator::default();
    let options = ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    };
    let ret = Parser::new(&allocator, source, source_type(ScriptKind::TypeScript))
        .with_options(options)
        .parse();
    !ret.panicked && errors_only(ret.diagnostics).is_empty()
}

/// The parser and early errors of `code` as JavaScript (a module, as the
/// file itself was read), without the hints [`parse`] adds for a user's
/// file: used on the code printed from a file, which must be JavaScript.
pub(crate) fn javascript_errors(code: &str) -> Vec<OxcDiagnostic> {
    let allocator = Allocator::default();
    let ret = Parser::new(&allocator, code, SourceType::mjs()).parse();
    let errors = errors_only(ret.diagnostics);
    if !errors.is_empty() {
        return errors;
    }
    if ret.panicked {
        return vec![OxcDiagnostic::error("the parser gave up on this file")];
    }
    analyze(&ret.program).1
}

/// Runs semantic analysis with the early-error checks; returns the scoping
/// the transformer needs and the errors found.
pub(crate) fn analyze(program: &Program<'_>) -> (Scoping, Vec<OxcDiagnostic>) {
    let ret = SemanticBuilder::new()
        .with_check_syntax_error(true)
        .with_enum_eval(true)
        .build(program);
    let errors = errors_only(ret.diagnostics);
    (ret.semantic.into_scoping(), errors)
}

pub(crate) fn errors_only(
    diagnostics: impl IntoIterator<Item = OxcDiagnostic>,
) -> Vec<OxcDiagnostic> {
    diagnostics
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .collect()
}
