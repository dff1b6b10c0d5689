//! Syntax a workflow may not use, reported as `SCRIPT_PARSE`:
//!
//! - module syntax: a workflow is one file, so `import`, `export`, `import()`
//!   and `import.meta` are rejected. Type-only imports and exports are erased
//!   like other types, and `export const meta` (handled by [`super::meta`]) is
//!   the one allowed value export;
//! - decorators, which the embedded engine cannot run and which oxc would
//!   only lower with helper imports.

use oxc::ast::ast::{
    Declaration, Decorator, ExportDefaultDeclarationKind, ImportDeclaration,
    ImportDeclarationSpecifier, ImportExpression, ImportMeta, Program, Statement,
    TSExternalModuleDeclaration, TSGlobalDeclaration, TSModuleBlock, TSModuleReference,
    TSNamespaceDeclaration,
};
use oxc::ast_visit::{Visit, walk};
use oxc::span::{GetSpan, Span};

use super::diagnostic::Located;
use super::meta;

const SINGLE_FILE: &str = "a workflow is a single file with no modules";

/// A forbidden construct: where it is reported and the source range
/// it covers (early errors inside that range are not reported separately).
#[derive(Debug, Clone)]
pub(crate) struct Forbidden {
    pub(crate) problem: Located,
    pub(crate) span: Span,
}

impl Forbidden {
    fn new(span: Span, message: String) -> Forbidden {
        Forbidden {
            problem: Located::new(span.start, message),
            span,
        }
    }

    pub(crate) fn covers(&self, offset: usize) -> bool {
        (self.span.start as usize..self.span.end as usize).contains(&offset)
    }
}

/// Every forbidden construct of `program`, in source order.
pub(crate) fn check(program: &Program<'_>) -> Vec<Forbidden> {
    let mut errors = Vec::new();
    for statement in &program.body {
        if let Some(message) = forbidden_statement(statement) {
            errors.push(Forbidden::new(statement.span(), message));
        }
    }
    let mut finder = NestedFinder {
        errors: Vec::new(),
        ambient: 0,
    };
    finder.visit_program(program);
    errors.extend(finder.errors);
    errors.sort_by_key(|e| e.span.start);
    errors
}

fn import_message() -> String {
    format!(
        "`import` is not supported: {SINGLE_FILE} (put what you need into the script itself; only `import type` is allowed)"
    )
}

fn export_message() -> String {
    format!(
        "`export` is not supported: {SINGLE_FILE} (the only export allowed is `export const meta = {{...}}`)"
    )
}

/// Why a top-level statement is forbidden module syntax, if it is.
fn forbidden_statement(statement: &Statement<'_>) -> Option<String> {
    let allowed = match statement {
        Statement::ImportDeclaration(decl) => is_type_only_import(decl),
        Statement::TSImportEqualsDeclaration(decl) => {
            // `import x = require("m")` loads a module; `import x = N.y` is a
            // namespace alias, not a module.
            decl.import_kind.is_type()
                || !matches!(
                    decl.module_reference,
                    TSModuleReference::ExternalModuleReference(_)
                )
        }
        Statement::ExportDeclaration(decl) => {
            meta::is_meta_declaration(&decl.declaration)
                || is_type_only_declaration(&decl.declaration)
        }
        Statement::ExportNamedDeclaration(decl) => {
            decl.export_kind.is_type()
                || (!decl.specifiers.is_empty()
                    && decl.specifiers.iter().all(|s| s.export_kind.is_type()))
        }
        Statement::ExportFromDeclaration(decl) => {
            decl.export_kind.is_type()
                || (!decl.specifiers.is_empty()
                    && decl.specifiers.iter().all(|s| s.export_kind.is_type()))
        }
        Statement::ExportAllDeclaration(decl) => decl.export_kind.is_type(),
        Statement::ExportDefaultDeclaration(decl) => match &decl.declaration {
            ExportDefaultDeclarationKind::TSInterfaceDeclaration(_) => true,
            ExportDefaultDeclarationKind::FunctionDeclaration(f) => f.is_typescript_syntax(),
            ExportDefaultDeclarationKind::ClassDeclaration(c) => c.declare,
            _ => false,
        },
        Statement::TSExportAssignment(_) | Statement::TSNamespaceExportDeclaration(_) => false,
        _ => return None,
    };
    if allowed {
        return None;
    }
    Some(match statement {
        Statement::ImportDeclaration(_) | Statement::TSImportEqualsDeclaration(_) => {
            import_message()
        }
        _ => export_message(),
    })
}

/// `import type …` or `import { type A, type B } from …`.
fn is_type_only_import(decl: &ImportDeclaration<'_>) -> bool {
    if decl.phase.is_some() {
        return false;
    }
    if decl.import_kind.is_type() {
        return true;
    }
    decl.specifiers.as_ref().is_some_and(|specifiers| {
        !specifiers.is_empty()
            && specifiers.iter().all(|s| match s {
                ImportDeclarationSpecifier::ImportSpecifier(s) => s.import_kind.is_type(),
                _ => false,
            })
    })
}

/// Declarations that leave nothing behind at run time.
fn is_type_only_declaration(decl: &Declaration<'_>) -> bool {
    match decl {
        Declaration::VariableDeclaration(d) => d.declare,
        Declaration::FunctionDeclaration(f) => f.is_typescript_syntax(),
        Declaration::ClassDeclaration(c) => c.declare,
        Declaration::TSTypeAliasDeclaration(_)
        | Declaration::TSInterfaceDeclaration(_)
        | Declaration::TSExternalModuleDeclaration(_)
        | Declaration::TSGlobalDeclaration(_) => true,
        Declaration::TSEnumDeclaration(d) => d.declare,
        Declaration::TSNamespaceDeclaration(d) => d.declare,
        Declaration::TSImportEqualsDeclaration(d) => d.import_kind.is_type(),
    }
}

/// Finds `import(…)`, `import.meta` and decorators anywhere in the program,
/// and module syntax below the top level. oxc's TypeScript parser accepts
/// `import`/`export` statements inside blocks and functions (its JavaScript
/// parser refuses them) and the transformer leaves them in place, so
/// without this check such a file prepared and its code then failed to
/// compile in the worker.
struct NestedFinder {
    errors: Vec<Forbidden>,
    /// Inside `declare module "m" {…}`, `declare global {…}` or
    /// `declare namespace N {…}`: erased as a whole, so module syntax in
    /// there is a type-level matter.
    ambient: usize,
}

impl NestedFinder {
    fn nested_statement(&mut self, statement: &Statement<'_>, namespace_member: bool) {
        if self.ambient > 0 {
            return;
        }
        let message = match statement {
            // `import x = N.y` is a namespace alias, which TypeScript
            // allows directly inside a namespace.
            Statement::TSImportEqualsDeclaration(decl)
                if namespace_member
                    && !matches!(
                        decl.module_reference,
                        TSModuleReference::ExternalModuleReference(_)
                    ) =>
            {
                return;
            }
            Statement::ImportDeclaration(_) | Statement::TSImportEqualsDeclaration(_) => {
                import_message()
            }
            // `export const x = …` directly inside a namespace is a member
            // of it, not module syntax.
            Statement::ExportDeclaration(_) if namespace_member => return,
            Statement::ExportDeclaration(_)
            | Statement::ExportNamedDeclaration(_)
            | Statement::ExportFromDeclaration(_)
            | Statement::ExportAllDeclaration(_)
            | Statement::ExportDefaultDeclaration(_)
            | Statement::TSExportAssignment(_)
            | Statement::TSNamespaceExportDeclaration(_) => export_message(),
            _ => return,
        };
        self.errors.push(Forbidden::new(statement.span(), message));
    }
}

impl<'a> Visit<'a> for NestedFinder {
    fn visit_program(&mut self, it: &Program<'a>) {
        // The top-level statements are checked by `forbidden_statement`;
        // only what is inside them is looked at here.
        for statement in &it.body {
            walk::walk_statement(self, statement);
        }
    }

    fn visit_ts_module_block(&mut self, it: &TSModuleBlock<'a>) {
        for statement in &it.body {
            self.nested_statement(statement, true);
            walk::walk_statement(self, statement);
        }
    }

    fn visit_statement(&mut self, it: &Statement<'a>) {
        self.nested_statement(it, false);
        walk::walk_statement(self, it);
    }

    fn visit_ts_external_module_declaration(&mut self, it: &TSExternalModuleDeclaration<'a>) {
        self.ambient += 1;
        walk::walk_ts_external_module_declaration(self, it);
        self.ambient -= 1;
    }

    fn visit_ts_global_declaration(&mut self, it: &TSGlobalDeclaration<'a>) {
        self.ambient += 1;
        walk::walk_ts_global_declaration(self, it);
        self.ambient -= 1;
    }

    fn visit_ts_namespace_declaration(&mut self, it: &TSNamespaceDeclaration<'a>) {
        let ambient = usize::from(it.declare);
        self.ambient += ambient;
        walk::walk_ts_namespace_declaration(self, it);
        self.ambient -= ambient;
    }

    fn visit_decorator(&mut self, it: &Decorator<'a>) {
        self.errors.push(Forbidden::new(
            it.span,
            "decorators are not supported in workflow scripts".to_string(),
        ));
        walk::walk_decorator(self, it);
    }

    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        self.errors.push(Forbidden::new(
            it.span,
            format!("dynamic `import()` is not supported: {SINGLE_FILE}"),
        ));
        walk::walk_import_expression(self, it);
    }

    fn visit_import_meta(&mut self, it: &ImportMeta) {
        self.errors.push(Forbidden::new(
            it.span,
            format!("`import.meta` is not supported: {SINGLE_FILE}"),
        ));
    }
}
