//! Host-side preparation of a workflow script file.
//!
//! A workflow is one `.ts`/`.mts`/`.js`/`.mjs` file whose top level is a
//! script *body*: top-level `await` and `return` are allowed because the body
//! runs inside an async function shell. [`prepare`] turns such a file into
//! something a worker can evaluate, entirely on the host and without running
//! any of it:
//!
//! 1. parse it with oxc (TypeScript syntax only in `.ts`/`.mts`); every parser
//!    or early error becomes `SCRIPT_PARSE` with `file:line:col`, the source
//!    line and a caret ([`ScriptError::Parse`]);
//! 2. reject, also as `SCRIPT_PARSE`, module syntax — `import`, `export`,
//!    `import()`, `import.meta` — except type-only imports/exports (erased
//!    like other types) and the one `export const meta = …` declaration; and
//!    decorators, which the engine cannot run;
//! 3. read `export const meta` from the syntax tree as a static literal,
//!    validate it ([`ScriptError::MetaInvalid`] lists every violation) and
//!    remove the statement from the body;
//! 4. strip TypeScript with oxc's transformer (types, `enum`, namespaces,
//!    parameter properties), print JavaScript with a source map and wrap it as
//!    `(async function () {\n…\n})` ([`PreparedScript::code`]);
//! 5. keep the mapping so engine positions in the generated code can be
//!    turned back into positions of the original file
//!    ([`PreparedScript::original_position`], [`PreparedScript::map_positions`]).
//!
//! What this module is not: it does not read files, does not evaluate or
//! type-check anything, does not fill in a default meta (the CLI does that)
//! and does not know about workers, providers or the runtime globals.
//!
//! Positions: lines and columns are 1-based; columns of the *original* file
//! count characters (Unicode scalar values). Columns of the *generated* code
//! are the ones the embedded engine (QuickJS) reports: 1-based byte offsets
//! within the line.
//!
//! The file is parsed with module (strict-mode) syntax rules so that
//! `import`/`export` and top-level `await` are recognised; strict-only syntax
//! errors (`with`, legacy octal literals, …) are therefore `SCRIPT_PARSE`
//! even though the body itself runs in sloppy mode inside the async function.

mod cache;
mod diagnostic;
mod forbidden;
mod literal;
mod meta;
mod nesting;
mod parse;
mod positions;
mod strip;

#[cfg(test)]
mod tests;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub(crate) use cache::prepare_cached;
use diagnostic::Located;
use positions::{LineIndex, SourceMapping};

/// The language a workflow file is written in, chosen by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptKind {
    /// `.ts` or `.mts`: TypeScript, stripped before execution.
    TypeScript,
    /// `.js` or `.mjs`: plain JavaScript; TypeScript syntax is a parse error.
    JavaScript,
}

impl ScriptKind {
    /// `.ts`/`.mts` => TypeScript, `.js`/`.mjs` => JavaScript (extension
    /// compared case-insensitively), anything else => `None`.
    pub fn from_path(path: &Path) -> Option<ScriptKind> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "ts" | "mts" => Some(ScriptKind::TypeScript),
            "js" | "mjs" => Some(ScriptKind::JavaScript),
            _ => None,
        }
    }
}

/// The workflow's `export const meta`, validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Meta {
    /// Non-empty name of the workflow.
    pub name: String,
    /// Non-empty description of what the workflow does.
    pub description: String,
    /// When an agent should pick this workflow.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub when_to_use: Option<String>,
    /// The phases the workflow announces, in order.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub phases: Option<Vec<PhaseMeta>>,
}

impl Meta {
    /// The meta of a file without one, as the CLI gives it: the file stem
    /// as the name, `workflow <file name>` as the description.
    pub fn default_for(path: &std::path::Path) -> Meta {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "workflow".into());
        let file = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| stem.clone());
        Meta {
            name: stem,
            description: format!("workflow {file}"),
            when_to_use: None,
            phases: None,
        }
    }
}

/// One entry of `meta.phases`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PhaseMeta {
    /// Non-empty title, the name `phase()` is called with.
    pub title: String,
    /// Longer description of the phase.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
    /// Model the phase's agents are expected to use.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub model: Option<String>,
    /// Provider the phase's agents are expected to use.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub provider: Option<String>,
}

/// A workflow file ready to be evaluated by a worker.
#[derive(Debug, Clone)]
pub struct PreparedScript {
    /// The name used in messages, as given by the caller (e.g. "scripts/review.ts").
    pub display_name: String,
    /// Complete JavaScript to evaluate as a *script* (not a module):
    /// `(async function () {\n<stripped body>\n})`. Evaluating it yields an
    /// async function whose call runs the body.
    pub code: String,
    /// The extracted `export const meta`, `None` when the file has none.
    pub meta: Option<Meta>,
    /// What the meta carried that Claude Code accepts and dsh does not use
    /// (an unknown field, a duplicate, a `whenToUse` or phase of the wrong
    /// shape): accepted, each a warning at its place in the file. A run of
    /// the file emits them as `workflow/warning`.
    pub warnings: Vec<Diagnostic>,
    mapping: SourceMapping,
}

impl PreparedScript {
    /// Maps a 1-based (line, column) in [`code`](Self::code), as the engine
    /// reports it for the file named `display_name`, to the 1-based (line,
    /// column) in the original source (column in characters). `None` when the
    /// position has no counterpart in the original file (e.g. the wrapper
    /// lines).
    pub fn original_position(&self, line: u32, column: u32) -> Option<(u32, u32)> {
        self.mapping.original_position(line, column)
    }

    /// The code of this script as a nested workflow: a function of the
    /// child's own hooks `(agent, phase, log, console, workflow, args)`
    /// that returns the async body function. The parameters shadow the
    /// globals of the same names for the child's body only; the body keeps
    /// its lines (the wrapper stays on the first line), so
    /// [`PreparedScript::map_positions`] still applies.
    pub fn nested_code(&self) -> String {
        let body = self.code.strip_prefix(strip::PREFIX).unwrap_or(&self.code);
        format!("{NESTED_PREFIX}{body}{NESTED_SUFFIX}")
    }

    /// Rewrites every `<display_name>:<line>:<col>` in `text` (an engine stack
    /// trace or error message) to original positions; occurrences that cannot
    /// be mapped are left as they are.
    pub fn map_positions(&self, text: &str) -> String {
        positions::rewrite_positions(text, &self.display_name, |line, column| {
            self.mapping.original_position(line, column)
        })
    }
}

/// The first line of [`PreparedScript::nested_code`]: it replaces
/// [`strip::PREFIX`] and, like it, ends with the line's only newline.
const NESTED_PREFIX: &str =
    "(function (agent, phase, log, console, workflow, args) { return (async function () {\n";
/// What closes [`NESTED_PREFIX`] after the body's own closing.
const NESTED_SUFFIX: &str = "; })";

/// Why a workflow file cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// `SCRIPT_PARSE`: the body does not parse, or uses module syntax or
    /// decorators.
    #[error("{}", diagnostic::render_with_carets(.0))]
    Parse(Vec<Diagnostic>),
    /// `META_INVALID`: meta is not a static literal or violates its schema.
    #[error("{}", diagnostic::render_plain(.0))]
    MetaInvalid(Vec<Diagnostic>),
}

impl ScriptError {
    /// The contract's error code: `"SCRIPT_PARSE"` or `"META_INVALID"`.
    pub fn code(&self) -> &'static str {
        match self {
            ScriptError::Parse(_) => "SCRIPT_PARSE",
            ScriptError::MetaInvalid(_) => "META_INVALID",
        }
    }

    /// `file:line:col: message` per diagnostic, without the source lines
    /// and carets: for a file whose text must not be shown to whoever
    /// asked for it (a nested workflow outside the project).
    pub fn without_source(&self) -> String {
        diagnostic::render_plain(self.diagnostics())
    }

    /// The individual diagnostics, in file order.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ScriptError::Parse(d) | ScriptError::MetaInvalid(d) => d,
        }
    }
}

/// One problem at one place of the original file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The display name of the file.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters (Unicode scalar values).
    pub column: u32,
    /// What is wrong.
    pub message: String,
    /// The whole source line, untrimmed, without its line terminator.
    pub source_line: String,
}

/// Parses, checks and strips a workflow file. Nothing in it is evaluated.
pub fn prepare(
    display_name: &str,
    source: &str,
    kind: ScriptKind,
) -> Result<PreparedScript, ScriptError> {
    let failed = |problem: Located| {
        let index = LineIndex::new(source);
        Err(ScriptError::Parse(diagnostic::build(
            display_name,
            source,
            &index,
            vec![problem],
        )))
    };
    // The parser and the passes after it recurse: bound the nesting first
    // (a stack overflow is an abort), and give a deep script a stack of
    // its own, whichever thread (main, a runtime worker) asked.
    let depth = match nesting::check(source) {
        Ok(depth) => depth,
        Err(problem) => return failed(problem),
    };
    // oxc is not expected to panic, but a library bug must not take the host
    // down with it: it becomes a SCRIPT_PARSE naming the start of the file.
    let guarded = || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            prepare_unguarded(display_name, source, kind)
        }))
        .ok()
    };
    let prepared = if depth <= nesting::INLINE_NESTING {
        guarded()
    } else {
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("dsh-prepare".into())
                .stack_size(nesting::PREPARE_STACK)
                .spawn_scoped(scope, guarded)
                .ok()
                .and_then(|t| t.join().ok())
                .flatten()
        })
    };
    prepared.unwrap_or_else(|| {
        failed(Located::new(
            0usize,
            "internal error: the script could not be prepared (the parser failed unexpectedly)",
        ))
    })
}

fn prepare_unguarded(
    display_name: &str,
    source: &str,
    kind: ScriptKind,
) -> Result<PreparedScript, ScriptError> {
    let index = LineIndex::new(source);
    let diagnostics =
        |problems: Vec<Located>| diagnostic::build(display_name, source, &index, problems);
    let from_oxc = |errors: &[oxc::diagnostics::OxcDiagnostic]| {
        diagnostics(errors.iter().map(Located::from_oxc).collect())
    };

    let allocator = oxc::allocator::Allocator::default();
    let mut program =
        parse::parse(&allocator, source, kind).map_err(|e| ScriptError::Parse(from_oxc(&e)))?;

    // Module syntax and meta are both read from the top-level statements;
    // the meta statement leaves the body here.
    let forbidden = forbidden::check(&program);
    let meta_result = meta::extract(&mut program);

    // Early errors of the body. Those inside a forbidden import/export are
    // consequences of it and not reported separately.
    let (scoping, semantic_errors) = parse::analyze(&program);
    let mut problems: Vec<Located> = forbidden.iter().map(|e| e.problem.clone()).collect();
    problems.extend(
        semantic_errors
            .iter()
            .map(Located::from_oxc)
            .filter(|p| !forbidden.iter().any(|e| e.covers(p.offset))),
    );
    if !problems.is_empty() {
        return Err(ScriptError::Parse(diagnostics(problems)));
    }

    let (meta, meta_warnings) =
        meta_result.map_err(|problems| ScriptError::MetaInvalid(diagnostics(problems)))?;
    let warnings = diagnostics(meta_warnings);

    let generated = strip::strip(&allocator, &mut program, scoping, display_name)
        .map_err(|e| ScriptError::Parse(from_oxc(&e)))?;
    let code = format!("{}{}{}", strip::PREFIX, generated.body, strip::SUFFIX);
    let mapping = SourceMapping::new(
        source,
        &code,
        &generated.body,
        strip::PREFIX_LINES,
        &generated.tokens,
    );
    // What the worker compiles must be JavaScript. oxc's TypeScript front
    // end lets through some code its JavaScript parser refuses (a class and
    // a function of one name); checking the printed code makes that a
    // SCRIPT_PARSE here, at its place in the file, so no parse error
    // reaches a worker.
    let problems = generated_code_problems(&code, &mapping, source, &index);
    if !problems.is_empty() {
        return Err(ScriptError::Parse(diagnostics(problems)));
    }
    Ok(PreparedScript {
        display_name: display_name.to_string(),
        code,
        meta,
        warnings,
        mapping,
    })
}

/// The JavaScript errors of the generated `code`, each placed where the
/// mapping puts it in `source` (at the start of the file when it has no
/// counterpart there).
fn generated_code_problems(
    code: &str,
    mapping: &SourceMapping,
    source: &str,
    index: &LineIndex,
) -> Vec<Located> {
    let errors = parse::javascript_errors(code);
    if errors.is_empty() {
        return Vec::new();
    }
    let code_index = LineIndex::new(code);
    errors
        .iter()
        .map(|e| {
            let at = Located::from_oxc(e);
            let (line, column) = code_index.byte_position(at.offset);
            match mapping.original_position(line, column) {
                Some((l, c)) => Located::new(index.offset_at(source, l, c), at.message),
                None => Located::new(
                    0usize,
                    format!("{} (in the JavaScript printed from this file)", at.message),
                ),
            }
        })
        .collect()
}

/// Validates a meta given as JSON by a library caller, with the same rules as
/// a file's `export const meta`. Every violation is listed, each naming its
/// path, e.g. `"meta.name: must be a non-empty string"`; what a file's meta
/// carries with a warning (an unknown field, a phase without a title) is
/// left out of the returned meta.
pub fn validate_meta_json(value: &serde_json::Value) -> Result<Meta, Vec<String>> {
    meta::validate_json(value)
}
