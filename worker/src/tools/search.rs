//! The search tools: Glob (file names) and Grep (file contents). Both walk
//! with the `ignore` crate (ripgrep's walker): `.gitignore` and friends are
//! honoured even outside a git checkout, hidden files are included, `.git`
//! itself is skipped, symlinks are not followed (a link out of the
//! workspace is never walked into).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use super::files::BINARY_SNIFF_BYTES;
use super::paths::{resolve, shown};
use super::{Ctx, Done, ToolError, cap_output, cut_line, input};

/// Paths Glob lists.
pub const GLOB_MAX_RESULTS: usize = 100;
/// Characters of one line Grep shows.
pub const GREP_LINE_CHARS: usize = 2000;
/// Files larger than this are not searched (generated data, not code).
pub const GREP_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

fn walker(root: &Path, types: Option<ignore::types::Types>) -> ignore::Walk {
    let mut b = ignore::WalkBuilder::new(root);
    b.hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git");
    if let Some(t) = types {
        b.types(t);
    }
    b.build()
}

/// Every regular file under `root` (or `root` itself when it is a file).
fn files(root: &Path, types: Option<ignore::types::Types>) -> Vec<PathBuf> {
    walker(root, types)
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(ignore::DirEntry::into_path)
        .collect()
}

#[derive(Deserialize)]
struct GlobInput {
    pattern: String,
    path: Option<String>,
}

pub(crate) fn glob(ctx: &Ctx, raw: &serde_json::Value) -> Result<Done, ToolError> {
    let inp: GlobInput = input(
        "Glob",
        raw,
        "pattern: string (e.g. \"**/*.rs\"), path?: string (a directory; default the workspace)",
    )?;
    let root = resolve(&ctx.workspace, "Glob", inp.path.as_deref().unwrap_or("."))?;
    if !root.is_dir() {
        return Err(ToolError::error(format!(
            "Glob: {} is not a directory",
            shown(&ctx.workspace, &root)
        )));
    }
    // `*` does not cross `/`, as in shells and Claude Code: `*.rs` is the
    // top level only, `**/*.rs` every level.
    let matcher = globset::GlobBuilder::new(&inp.pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| ToolError::error(format!("Glob: invalid pattern {:?}: {e}", inp.pattern)))?
        .compile_matcher();
    let mut found: Vec<(SystemTime, String)> = files(&root, None)
        .into_iter()
        .filter(|p| p.strip_prefix(&root).is_ok_and(|rel| matcher.is_match(rel)))
        .map(|p| {
            let mtime = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            (mtime, shown(&ctx.workspace, &p))
        })
        .collect();
    if found.is_empty() {
        return Ok(Done::ok("No files found"));
    }
    // Newest first; the path breaks ties so the order is stable.
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    let mut out: String = found
        .iter()
        .take(GLOB_MAX_RESULTS)
        .map(|(_, p)| format!("{p}\n"))
        .collect();
    if total > GLOB_MAX_RESULTS {
        let _ = write!(
            out,
            "[{total} files match; showing the {GLOB_MAX_RESULTS} most recently modified: narrow the pattern or path]"
        );
    }
    cap_output(&mut out, ctx.max_output_bytes, || {
        format!("[output truncated at {} bytes]", ctx.max_output_bytes)
    });
    Ok(Done::ok(out))
}

#[derive(Deserialize)]
struct GrepInput {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    output_mode: Option<String>,
    #[serde(rename = "-i", default)]
    case_insensitive: bool,
    #[serde(rename = "-n")]
    line_numbers: Option<bool>,
    #[serde(rename = "-A")]
    after: Option<usize>,
    #[serde(rename = "-B")]
    before: Option<usize>,
    #[serde(rename = "-C")]
    context: Option<usize>,
    head_limit: Option<usize>,
    #[serde(rename = "type")]
    file_type: Option<String>,
}

const GREP_EXPECTED: &str = "pattern: string (a regular expression), path?: string, glob?: string, output_mode?: \"files_with_matches\" | \"content\" | \"count\", -i?: boolean, -n?: boolean, -A?/-B?/-C?: number, head_limit?: number, type?: string (e.g. \"rust\")";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Files,
    Content,
    Count,
}

pub(crate) fn grep(ctx: &Ctx, raw: &serde_json::Value) -> Result<Done, ToolError> {
    let inp: GrepInput = input("Grep", raw, GREP_EXPECTED)?;
    let mode = match inp.output_mode.as_deref() {
        None | Some("files_with_matches") => Mode::Files,
        Some("content") => Mode::Content,
        Some("count") => Mode::Count,
        Some(other) => {
            return Err(ToolError::error(format!(
                "Grep: invalid input: output_mode {other:?}; expected \"files_with_matches\", \"content\" or \"count\""
            )));
        }
    };
    let re = regex::RegexBuilder::new(&inp.pattern)
        .case_insensitive(inp.case_insensitive)
        .build()
        .map_err(|e| {
            ToolError::error(format!(
                "Grep: invalid regular expression {:?}: {e}",
                inp.pattern
            ))
        })?;
    let root = resolve(&ctx.workspace, "Grep", inp.path.as_deref().unwrap_or("."))?;
    let name_filter = name_filter(inp.glob.as_deref())?;
    let types = file_types(inp.file_type.as_deref())?;
    let mut paths = files(&root, types);
    paths.sort();
    let lines = Lines {
        numbers: inp.line_numbers.unwrap_or(true),
        before: inp.before.or(inp.context).unwrap_or(0),
        after: inp.after.or(inp.context).unwrap_or(0),
    };
    let mut entries = Entries {
        list: Vec::new(),
        bytes: 0,
        limit: inp.head_limit.filter(|n| *n > 0).unwrap_or(usize::MAX),
        max_bytes: ctx.max_output_bytes,
    };
    for path in paths {
        if let Some((m, whole)) = &name_filter {
            let subject = if *whole {
                path.strip_prefix(&root).unwrap_or(&path)
            } else {
                Path::new(path.file_name().unwrap_or_default())
            };
            if !m.is_match(subject) {
                continue;
            }
        }
        let Some(text) = searchable(&path) else {
            continue;
        };
        let name = shown(&ctx.workspace, &path);
        match mode {
            Mode::Files => {
                if re.is_match(&text) {
                    entries.push(name);
                }
            }
            Mode::Count => {
                let n = text.lines().filter(|l| re.is_match(l)).count();
                if n > 0 {
                    entries.push(format!("{name}:{n}"));
                }
            }
            Mode::Content => content(&text, &re, &name, &lines, &mut entries),
        }
        if entries.full() {
            break;
        }
    }
    Ok(answer(ctx, mode, entries))
}

/// `glob`: a pattern without `/` filters file names (`*.rs`), one with
/// `/` the path relative to the search root (`src/**/*.rs`); the flag says
/// which.
fn name_filter(glob: Option<&str>) -> Result<Option<(globset::GlobMatcher, bool)>, ToolError> {
    let Some(g) = glob else {
        return Ok(None);
    };
    let matcher = globset::Glob::new(g)
        .map_err(|e| ToolError::error(format!("Grep: invalid input: glob {g:?}: {e}")))?
        .compile_matcher();
    Ok(Some((matcher, g.contains('/'))))
}

/// `type`: ripgrep's file types (`rust`, `py`, …).
fn file_types(file_type: Option<&str>) -> Result<Option<ignore::types::Types>, ToolError> {
    let Some(t) = file_type else {
        return Ok(None);
    };
    let mut b = ignore::types::TypesBuilder::new();
    b.add_defaults();
    b.select(t);
    let types = b
        .build()
        .map_err(|e| ToolError::error(format!("Grep: invalid input: type {t:?}: {e}")))?;
    Ok(Some(types))
}

/// How content mode shows a match: line numbers, and lines of context.
struct Lines {
    numbers: bool,
    before: usize,
    after: usize,
}

/// The entries found so far, and what they would print. Past the output
/// cap nothing more is collected (a pattern like "." over a big tree must
/// not fill memory with lines that would be cut anyway).
struct Entries {
    list: Vec<String>,
    bytes: usize,
    /// `head_limit` (no limit: `usize::MAX`).
    limit: usize,
    max_bytes: usize,
}

impl Entries {
    fn push(&mut self, entry: String) {
        self.bytes += entry.len() + 1;
        self.list.push(entry);
    }

    /// At `head_limit`, or past the output cap: the search stops.
    fn full(&self) -> bool {
        self.list.len() >= self.limit || self.bytes > self.max_bytes
    }
}

/// Content mode for one file: each matching line (`name:N:line`) with its
/// context (`name-N-line`), `--` between groups that do not touch; stops
/// as soon as `entries` is full.
fn content(text: &str, re: &regex::Regex, name: &str, opts: &Lines, entries: &mut Entries) {
    let lines: Vec<&str> = text.lines().collect();
    let hits: Vec<usize> = (0..lines.len())
        .filter(|i| re.is_match(lines[*i]))
        .collect();
    let mut last_shown: Option<usize> = None;
    for &hit in &hits {
        let from = hit.saturating_sub(opts.before);
        let to = hit
            .saturating_add(opts.after)
            .min(lines.len().saturating_sub(1));
        let start = match last_shown {
            Some(l) if l + 1 >= from => l + 1,
            Some(_) => {
                // Not counted in the bytes, as it never was.
                entries.list.push("--".into());
                from
            }
            None => from,
        };
        for (i, line) in lines.iter().enumerate().take(to + 1).skip(start) {
            let sep = if hits.binary_search(&i).is_ok() {
                ':'
            } else {
                '-'
            };
            let line = cut_line(line, GREP_LINE_CHARS);
            entries.push(if opts.numbers {
                format!("{name}{sep}{}{sep}{line}", i + 1)
            } else {
                format!("{name}{sep}{line}")
            });
            if entries.full() {
                return;
            }
        }
        last_shown = Some(to.max(last_shown.unwrap_or(0)));
    }
}

/// What Grep answers: the entries up to `head_limit` and a line when it
/// stopped there, cut to the output cap; or that nothing was found.
fn answer(ctx: &Ctx, mode: Mode, entries: Entries) -> Done {
    let Entries {
        list: mut entries,
        limit,
        ..
    } = entries;
    entries.truncate(limit);
    if entries.is_empty() {
        return Done::ok(if mode == Mode::Files {
            "No files found"
        } else {
            "No matches found"
        });
    }
    let mut out = entries.join("\n");
    out.push('\n');
    if entries.len() == limit {
        let _ = write!(out, "[stopped at head_limit={limit}]");
    }
    cap_output(&mut out, ctx.max_output_bytes, || {
        format!(
            "[output truncated at {} bytes: narrow the pattern, path or glob, or use head_limit]",
            ctx.max_output_bytes
        )
    });
    Done::ok(out)
}

/// A file's text, or None when it is not worth searching: unreadable,
/// too large, or binary (a NUL in its first bytes, as ripgrep decides).
fn searchable(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > GREP_MAX_FILE_BYTES {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    if bytes.iter().take(BINARY_SNIFF_BYTES).any(|b| *b == 0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}
