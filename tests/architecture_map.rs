//! docs/architecture.md cannot drift from the tree: its map names every
//! module file of the workspace's crates, and names no file that is gone.
//!
//! The rule, in full:
//! - A *module file* is every `*.rs` file under the `src/` of each crate in
//!   [`CRATE_SOURCES`] (the libraries, the worker's binaries and the `dsh`
//!   binary), except test-only files: a file named `tests.rs` or
//!   `test_server.rs`, and every file under a directory named `tests`.
//!   (These are the names the workspace gives its `#[cfg(test)] mod` files;
//!   a new test-only file named otherwise must be listed in the map or
//!   renamed.)
//! - The *map* is the `## Map` section of docs/architecture.md, up to the
//!   next `## ` heading. In its tables, the first cell of a row is one
//!   path in backticks, relative to the workspace root (a directory ends
//!   with `/`).
//! - Every module file is the first cell of one map row, and every first
//!   cell names a file or directory that exists.
//!
//! Also: every link to `architecture.md#anchor` in the other docs names a
//! heading of architecture.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The source directories whose module files the map must list.
const CRATE_SOURCES: &[&str] = &[
    "protocol/src",
    "exec/src",
    "seam/src",
    "engine/src",
    "providers/src",
    "journal/src",
    "store/src",
    "worker/src",
    "orchestrator/src",
    "src",
];

const ARCHITECTURE: &str = "docs/architecture.md";

fn root() -> PathBuf {
    // The root package's manifest is the workspace's.
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether a file is compiled only for tests (see the rule above).
fn test_only(relative: &Path) -> bool {
    let name = relative.file_name().and_then(|n| n.to_str());
    matches!(name, Some("tests.rs" | "test_server.rs"))
        || relative
            .parent()
            .is_some_and(|dir| dir.components().any(|c| c.as_os_str() == "tests"))
}

/// Every module file under `dir`, as workspace-relative paths with `/`.
fn module_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            module_files(root, &path, out);
            continue;
        }
        let relative = path.strip_prefix(root).unwrap();
        if path.extension().is_some_and(|e| e == "rs") && !test_only(relative) {
            out.insert(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The `## Map` section of the document.
fn map_section(doc: &str) -> &str {
    let start = doc
        .find("\n## Map\n")
        .unwrap_or_else(|| panic!("{ARCHITECTURE} has no `## Map` section"));
    let rest = &doc[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The first cells of the map's table rows that are one backticked path.
fn map_paths(map: &str) -> Vec<String> {
    map.lines()
        .filter_map(|line| line.trim().strip_prefix('|'))
        .filter_map(|row| row.split('|').next())
        .filter_map(|cell| {
            let cell = cell.trim();
            let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
            (!inner.contains('`')).then(|| inner.to_string())
        })
        .collect()
}

#[test]
fn the_map_lists_every_module_file_and_no_missing_one() {
    let root = root();
    let doc = fs::read_to_string(root.join(ARCHITECTURE)).unwrap();
    let listed = map_paths(map_section(&doc));

    let mut files = BTreeSet::new();
    for dir in CRATE_SOURCES {
        module_files(&root, &root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "found only {} module files", files.len());

    let listed_set: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
    let unlisted: Vec<&String> = files
        .iter()
        .filter(|f| !listed_set.contains(f.as_str()))
        .collect();
    let gone: Vec<&String> = listed
        .iter()
        .filter(|p| !root.join(p.trim_end_matches('/')).exists())
        .collect();

    let mut problems = String::new();
    if !unlisted.is_empty() {
        problems.push_str(&format!(
            "these module files are missing from the map in {ARCHITECTURE}: add a row for \
             each to its crate's table (the path in backticks, then what it is for):\n"
        ));
        for f in &unlisted {
            problems.push_str(&format!("  {f}\n"));
        }
    }
    if !gone.is_empty() {
        problems.push_str(&format!(
            "the map in {ARCHITECTURE} names paths that do not exist: remove or correct \
             their lines:\n"
        ));
        for p in &gone {
            problems.push_str(&format!("  {p}\n"));
        }
    }
    assert!(problems.is_empty(), "{problems}");
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn links_into_the_architecture_page_name_its_headings() {
    let root = root();
    let doc = fs::read_to_string(root.join(ARCHITECTURE)).unwrap();
    let anchors: BTreeSet<String> = doc
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();

    let mut sources: Vec<PathBuf> = vec![root.join("README.md")];
    for entry in fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            sources.push(path);
        }
    }
    let mut broken = Vec::new();
    for source in &sources {
        let text = fs::read_to_string(source).unwrap();
        let own = source.ends_with(ARCHITECTURE);
        // A link into the page: `architecture.md#x` from elsewhere, `(#x)`
        // inside it.
        let marker = if own { "](#" } else { "architecture.md#" };
        for (at, _) in text.match_indices(marker) {
            let rest = &text[at + marker.len()..];
            let end = rest.find([')', ' ', '"']).unwrap_or(rest.len());
            let target = &rest[..end];
            if !anchors.contains(target) {
                broken.push(format!(
                    "{}: #{target}",
                    source.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to headings that {ARCHITECTURE} does not have (fix the link or the heading):\n  {}",
        broken.join("\n  ")
    );
}
