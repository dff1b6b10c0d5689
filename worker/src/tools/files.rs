//! The file tools: Read, LS, Edit, Write. Inputs are named as Claude
//! Code's tools name them, which workflow prompts assume.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read as _};

use serde::Deserialize;

use super::paths::{io_error, resolve, shown, writable};
use super::{Ctx, Done, ToolError, cap_output, cut_line, input};

/// Lines Read shows when no `limit` is given.
pub const READ_DEFAULT_LIMIT: usize = 2000;
/// Characters of one line Read shows.
pub const READ_LINE_CHARS: usize = 2000;
/// Bytes at the start of a file checked for a NUL (binary).
pub const BINARY_SNIFF_BYTES: usize = 8192;
/// Entries LS lists.
pub const LS_MAX_ENTRIES: usize = 1000;

#[derive(Deserialize)]
struct ReadInput {
    file_path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

pub(crate) fn read(ctx: &Ctx, raw: &serde_json::Value) -> Result<Done, ToolError> {
    let inp: ReadInput = input(
        "Read",
        raw,
        "file_path: string, offset?: number (first line, 1-based), limit?: number",
    )?;
    let path = resolve(&ctx.workspace, "Read", &inp.file_path)?;
    let name = shown(&ctx.workspace, &path);
    if path.is_dir() {
        return Err(ToolError::error(format!(
            "Read: {name} is a directory; use LS to list it"
        )));
    }
    regular_file("Read", &path, &name)?;
    let file = std::fs::File::open(&path).map_err(|e| io_error("Read", "read", &name, &e))?;
    let mut reader = BufReader::new(file);
    let head = reader
        .fill_buf()
        .map_err(|e| io_error("Read", "read", &name, &e))?;
    if head.iter().take(BINARY_SNIFF_BYTES).any(|b| *b == 0) {
        return Err(ToolError::error(format!(
            "Read: {name} is a binary file (it has a NUL byte in its first {BINARY_SNIFF_BYTES} bytes); Read shows text files only"
        )));
    }
    let first = inp.offset.unwrap_or(1).max(1);
    let limit = inp.limit.unwrap_or(READ_DEFAULT_LIMIT).max(1);
    let mut out = String::new();
    let mut n = 0usize;
    let mut shown_last = 0usize;
    let mut more = false;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let got = read_line_capped(&mut reader, &mut buf, READ_LINE_BYTES)
            .map_err(|e| io_error("Read", "read", &name, &e))?;
        if got == 0 {
            break;
        }
        n += 1;
        if n < first {
            continue;
        }
        if n >= first.saturating_add(limit) {
            more = true;
            break;
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']);
        let _ = writeln!(out, "{n:>6}\t{}", cut_line(line, READ_LINE_CHARS));
        shown_last = n;
        if out.len() > ctx.max_output_bytes {
            more = true;
            break;
        }
    }
    if n == 0 {
        return Ok(Done::ok(format!("{name} is empty")));
    }
    if shown_last == 0 {
        return Err(ToolError::error(format!(
            "Read: {name} has {n} lines; offset {first} is past the end"
        )));
    }
    let capped = cap_output(&mut out, ctx.max_output_bytes, || {
        format!(
            "[output truncated at {} bytes; read further with offset={}]",
            ctx.max_output_bytes, shown_last
        )
    });
    if more && !capped {
        let _ = write!(
            out,
            "[showing lines {first}-{shown_last}; more follow: read further with offset={}]",
            shown_last + 1
        );
    }
    Ok(Done::ok(out))
}

#[derive(Deserialize)]
struct LsInput {
    path: Option<String>,
    #[serde(default)]
    ignore: Vec<String>,
}

pub(crate) fn ls(ctx: &Ctx, raw: &serde_json::Value) -> Result<Done, ToolError> {
    let inp: LsInput = input(
        "LS",
        raw,
        "path: string (a directory), ignore?: [glob patterns of names to leave out]",
    )?;
    let path = resolve(&ctx.workspace, "LS", inp.path.as_deref().unwrap_or("."))?;
    let name = shown(&ctx.workspace, &path);
    let mut ignore = globset::GlobSetBuilder::new();
    for pat in &inp.ignore {
        let g = globset::Glob::new(pat).map_err(|e| {
            ToolError::error(format!("LS: invalid input: ignore pattern {pat:?}: {e}"))
        })?;
        ignore.add(g);
    }
    let ignore = ignore
        .build()
        .map_err(|e| ToolError::error(format!("LS: invalid input: ignore: {e}")))?;
    if !path.is_dir() {
        return Err(ToolError::error(format!(
            "LS: {name} is not a directory; use Read to read a file"
        )));
    }
    let dir = std::fs::read_dir(&path).map_err(|e| io_error("LS", "list", &name, &e))?;
    let mut entries = Vec::new();
    for entry in dir {
        let entry = entry.map_err(|e| io_error("LS", "list", &name, &e))?;
        let file_name = entry.file_name();
        if ignore.is_match(&file_name) {
            continue;
        }
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let rel = shown(&ctx.workspace, &entry.path());
        entries.push(if is_dir { format!("{rel}/") } else { rel });
    }
    entries.sort();
    if entries.is_empty() {
        return Ok(Done::ok(format!("{name} is empty")));
    }
    let total = entries.len();
    entries.truncate(LS_MAX_ENTRIES);
    let mut out = entries.join("\n");
    out.push('\n');
    if total > LS_MAX_ENTRIES {
        let _ = write!(
            out,
            "[{total} entries; showing the first {LS_MAX_ENTRIES}: list a subdirectory, or use Glob]"
        );
    }
    cap_output(&mut out, ctx.max_output_bytes, || {
        format!("[output truncated at {} bytes]", ctx.max_output_bytes)
    });
    Ok(Done::ok(out))
}

#[derive(Deserialize)]
struct EditInput {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

pub(crate) fn edit(ctx: &Ctx, raw: &serde_json::Value) -> Result<Done, ToolError> {
    let inp: EditInput = input(
        "Edit",
        raw,
        "file_path: string, old_string: string, new_string: string, replace_all?: boolean",
    )?;
    let path = resolve(&ctx.workspace, "Edit", &inp.file_path)?;
    writable(&ctx.workspace, "Edit", &path)?;
    let name = shown(&ctx.workspace, &path);
    if inp.old_string.is_empty() {
        return Err(ToolError::error(
            "Edit: old_string is empty; give the exact text to replace (use Write to create a file)",
        ));
    }
    if inp.old_string == inp.new_string {
        return Err(ToolError::error(
            "Edit: old_string and new_string are the same; nothing would change",
        ));
    }
    if path.is_dir() {
        return Err(ToolError::error(format!("Edit: {name} is a directory")));
    }
    regular_file("Edit", &path, &name)?;
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| io_error("Edit", "read", &name, &e))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ToolError::error(format!("Edit: {name} is not UTF-8 text")))?;
    let count = text.matches(inp.old_string.as_str()).count();
    if count == 0 {
        return Err(ToolError::error(format!(
            "Edit: old_string was not found in {name} (it must match exactly, whitespace included)"
        )));
    }
    if count > 1 && !inp.replace_all {
        return Err(ToolError::error(format!(
            "Edit: old_string occurs {count} times in {name}; include more surrounding text to make it unique, or set replace_all to true"
        )));
    }
    let new = if inp.replace_all {
        text.replace(&inp.old_string, &inp.new_string)
    } else {
        text.replacen(&inp.old_string, &inp.new_string, 1)
    };
    std::fs::write(&path, new).map_err(|e| io_error("Edit", "write", &name, &e))?;
    let what = if count == 1 {
        "1 occurrence".to_string()
    } else {
        format!("{count} occurrences")
    };
    Ok(Done::ok(format!("Edited {name}: replaced {what}")))
}

#[derive(Deserialize)]
struct WriteInput {
    file_path: String,
    content: String,
}

pub(crate) fn write(ctx: &Ctx, raw: &serde_json::Value) -> Result<Done, ToolError> {
    let inp: WriteInput = input("Write", raw, "file_path: string, content: string")?;
    let path = resolve(&ctx.workspace, "Write", &inp.file_path)?;
    writable(&ctx.workspace, "Write", &path)?;
    let name = shown(&ctx.workspace, &path);
    if path.is_dir() {
        return Err(ToolError::error(format!(
            "Write: {name} is a directory; give a file path"
        )));
    }
    // Checked by `resolve`: the parent (every missing directory) lies
    // beneath the workspace.
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| io_error("Write", "create the directory of", &name, &e))?;
    }
    let existed = path.exists();
    if existed {
        regular_file("Write", &path, &name)?;
    }
    std::fs::write(&path, inp.content.as_bytes())
        .map_err(|e| io_error("Write", "write", &name, &e))?;
    let verb = if existed { "Overwrote" } else { "Created" };
    Ok(Done::ok(format!(
        "{verb} {name} ({} bytes)",
        inp.content.len()
    )))
}

/// Refuses anything but a regular file before opening it: opening a FIFO
/// (which a Bash call can make) would block the tool call forever, and a
/// device is not a file the model means.
fn regular_file(tool: &str, path: &std::path::Path, name: &str) -> Result<(), ToolError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(tool, "read", name, &e))?;
    if meta.is_file() {
        Ok(())
    } else {
        Err(ToolError::error(format!(
            "{tool}: {name} is not a regular file"
        )))
    }
}

/// Most bytes of one line Read keeps (lines are shown cut far shorter; a
/// newline-free file of gigabytes must not be read into memory whole).
const READ_LINE_BYTES: usize = 64 * 1024;

/// Reads one line into `buf`, at most `cap` bytes of it; the rest of a
/// longer line is skipped. Returns the bytes kept (0 at the end).
fn read_line_capped<R: std::io::BufRead>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<usize> {
    let got = r.by_ref().take(cap as u64).read_until(b'\n', buf)?;
    if got == cap && buf.last() != Some(&b'\n') {
        loop {
            let avail = r.fill_buf()?;
            if avail.is_empty() {
                break;
            }
            match avail.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    r.consume(i + 1);
                    break;
                }
                None => {
                    let n = avail.len();
                    r.consume(n);
                }
            }
        }
    }
    Ok(got)
}
