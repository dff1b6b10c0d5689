//! A line diff of two texts (Myers, from `similar`), shown with a few
//! lines of context around each change — enough to read how a workflow's
//! pretty-printed result differs from the expected one.

use std::time::{Duration, Instant};

use similar::{Algorithm, DiffTag, capture_diff_slices_deadline};

/// Longest a diff is searched for; past it `similar` settles for a
/// coarser (still correct) diff, so a huge result cannot stall the test.
const DEADLINE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Removed,
    Added,
}

/// The lines of a diff of `expected` → `actual`: `- ` lines only in
/// `expected`, `+ ` lines only in `actual`, `  ` lines in both; runs of
/// unchanged lines further than `context` lines from a change collapse
/// into one `  …` line. Removals come before additions at each change.
pub fn line_diff(expected: &str, actual: &str, context: usize) -> Vec<String> {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let deadline = Instant::now().checked_add(DEADLINE);
    let mut ops = Vec::with_capacity(a.len() + b.len());
    for op in capture_diff_slices_deadline(Algorithm::Myers, &a, &b, deadline) {
        let (tag, old, new) = op.as_tag_tuple();
        if tag == DiffTag::Equal {
            ops.extend(a[old].iter().map(|l| (Op::Same, *l)));
            continue;
        }
        ops.extend(a[old].iter().map(|l| (Op::Removed, *l)));
        ops.extend(b[new].iter().map(|l| (Op::Added, *l)));
    }
    render(&ops, context)
}

fn render(ops: &[(Op, &str)], context: usize) -> Vec<String> {
    let changes: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| *op != Op::Same)
        .map(|(i, _)| i)
        .collect();
    let near_change = |i: usize| {
        // The first change at or after i - context.
        let from = i.saturating_sub(context);
        let k = changes.partition_point(|c| *c < from);
        changes.get(k).is_some_and(|c| *c <= i + context)
    };
    let mut out = Vec::new();
    let mut skipping = false;
    for (i, (op, line)) in ops.iter().enumerate() {
        let prefix = match op {
            Op::Same if !near_change(i) => {
                if !skipping {
                    out.push("  …".to_string());
                    skipping = true;
                }
                continue;
            }
            Op::Same => "  ",
            Op::Removed => "- ",
            Op::Added => "+ ",
        };
        skipping = false;
        out.push(format!("{prefix}{line}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::equal("a\nb", "a\nb", &["  …"])]
    #[case::changed_line("a\nb\nc", "a\nx\nc", &["  a", "- b", "+ x", "  c"])]
    #[case::added_at_end("a", "a\nb", &["  a", "+ b"])]
    #[case::removed_at_start("a\nb", "b", &["- a", "  b"])]
    #[case::empty_expected("", "a", &["+ a"])]
    #[case::context_collapses(
        "1\n2\n3\n4\n5\n6\n7\n8",
        "1\n2\n3\n4\n5\n6\n7\nX",
        &["  …", "  6", "  7", "- 8", "+ X"]
    )]
    #[case::two_hunks(
        "a\n1\n2\n3\n4\n5\nb",
        "A\n1\n2\n3\n4\n5\nB",
        &["- a", "+ A", "  1", "  2", "  …", "  4", "  5", "- b", "+ B"]
    )]
    fn diffs(#[case] expected: &str, #[case] actual: &str, #[case] want: &[&str]) {
        assert_eq!(line_diff(expected, actual, 2), want);
    }
}
