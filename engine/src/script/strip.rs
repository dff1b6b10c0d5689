//! Stripping TypeScript and printing the body as JavaScript with a source map.

use std::path::PathBuf;

use oxc::allocator::Allocator;
use oxc::ast::ast::Program;
use oxc::codegen::{Codegen, CodegenOptions, CommentOptions};
use oxc::diagnostics::OxcDiagnostic;
use oxc::semantic::Scoping;
use oxc::transformer::{TransformOptions, Transformer};

use super::parse::errors_only;
use super::positions::RawToken;

/// The line put before the printed body; it ends with exactly one newline.
pub(crate) const PREFIX: &str = "(async function () {\n";
/// Number of lines [`PREFIX`] occupies.
pub(crate) const PREFIX_LINES: u32 = 1;
/// What closes the async function after the body.
pub(crate) const SUFFIX: &str = "\n})";

/// The printed body and codegen's source map of it.
pub(crate) struct Generated {
    pub(crate) body: String,
    pub(crate) tokens: Vec<RawToken>,
}

/// Erases TypeScript (types, `enum`, namespaces, parameter properties, …)
/// with oxc's transformer, drops what remains of module syntax (only
/// type-only imports/exports passed the checks, and the transformer may add
/// an empty `export {}`) and the hashbang, and prints the body unminified and
/// without comments. Transformer errors are returned as they are.
pub(crate) fn strip<'a>(
    allocator: &'a Allocator,
    program: &mut Program<'a>,
    scoping: Scoping,
    display_name: &str,
) -> Result<Generated, Vec<OxcDiagnostic>> {
    let path = PathBuf::from(display_name);
    let ret = Transformer::new(allocator, &path, &TransformOptions::default())
        .build_with_scoping(scoping, program);
    let errors = errors_only(ret.diagnostics);
    if !errors.is_empty() {
        return Err(errors);
    }

    program
        .body
        .retain(|statement| statement.as_module_declaration().is_none());
    program.hashbang = None;

    let options = CodegenOptions {
        comments: CommentOptions::disabled(),
        source_map_path: Some(path),
        ..CodegenOptions::default()
    };
    let printed = Codegen::new().with_options(options).build(program);
    let tokens = printed
        .map
        .map(|map| {
            map.get_tokens()
                .map(|t| RawToken {
                    dst_line: t.get_dst_line(),
                    dst_col: t.get_dst_col(),
                    src_line: t.get_src_line(),
                    src_col: t.get_src_col(),
                })
                .collect()
        })
        .unwrap_or_default();
    let body = printed.code.trim_end_matches(['\n', '\r']).to_string();
    Ok(Generated { body, tokens })
}
