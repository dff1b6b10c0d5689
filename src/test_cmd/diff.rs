//! A line diff (longest common subsequence) of two texts, shown with a few
//! lines of context around each change — enough to read how a workflow's
//! pretty-printed result differs from the expected one.

/// Longest texts (lines × lines) diffed line by line; beyond that the two
/// texts are shown whole, one after the other.
const MAX_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Removed,
    Added,
}

/// The lines of a diff of `expected` → `actual`: `- ` lines only in
/// `expected`, `+ ` lines only in `actual`, `  ` lines in both; runs of
/// unchanged lines further than `context` lines from a change collapse
/// into one `  …` line.
pub fn line_diff(expected: &str, actual: &str, context: usize) -> Vec<String> {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let ops = if a.len().saturating_mul(b.len()) > MAX_CELLS {
        a.iter()
            .map(|l| (Op::Removed, *l))
            .chain(b.iter().map(|l| (Op::Added, *l)))
            .collect()
    } else {
        lcs_ops(&a, &b)
    };
    render(&ops, context)
}

/// The edit script of `a` → `b` from an LCS table; removals come before
/// additions at each change.
fn lcs_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: length of the LCS of a[i..] and b[j..].
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if a[i] == b[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let mut ops = Vec::with_capacity(n + m);
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] {
            ops.push((Op::Same, a[i]));
            i += 1;
            j += 1;
        } else if lcs[at(i + 1, j)] >= lcs[at(i, j + 1)] {
            ops.push((Op::Removed, a[i]));
            i += 1;
        } else {
            ops.push((Op::Added, b[j]));
            j += 1;
        }
    }
    ops.extend(a[i..].iter().map(|l| (Op::Removed, *l)));
    ops.extend(b[j..].iter().map(|l| (Op::Added, *l)));
    ops
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
