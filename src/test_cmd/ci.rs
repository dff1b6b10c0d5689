//! What `dsh workflow test` tells a CI system besides its own lines: a
//! JUnit file (`--junit FILE`, with `quick-junit`, the crate nextest uses:
//! one test case per workflow, its diff or error as the failure's text,
//! its tokens and cost as properties), and under GitHub Actions
//! (`GITHUB_ACTIONS=true`) a Markdown summary appended to
//! `$GITHUB_STEP_SUMMARY` and an `::error file=…,line=…::` annotation per
//! failing workflow.

use std::fmt::Write as _;
use std::path::Path;

use quick_junit::{NonSuccessKind, Property, TestCase, TestCaseStatus, TestSuite};

use super::{Case, Report, Verdict};

/// The name of the JUnit report and its one suite.
const SUITE: &str = "dsh workflow test";

/// The JUnit XML of `results`, in discovery order.
pub(super) fn junit(results: &[(&Case, &Report)]) -> Result<String, String> {
    let mut suite = TestSuite::new(SUITE);
    for (case, report) in results {
        let status = match &report.verdict {
            Verdict::Ok | Verdict::New => TestCaseStatus::success(),
            Verdict::Fail(lines) => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status
                    .set_message(lines.first().cloned().unwrap_or_default())
                    .set_description(lines.join("\n"));
                status
            }
        };
        let mut test = TestCase::new(case.script.display().to_string(), status);
        test.set_classname(SUITE);
        if let Some(d) = report.elapsed {
            test.set_time(d);
        }
        if let Some(u) = &report.usage {
            test.add_property(Property::new("tokens.input", u.input.to_string()));
            test.add_property(Property::new("tokens.output", u.output.to_string()));
            if let Some(c) = u.cost_usd {
                test.add_property(Property::new("cost.usd", format!("{c}")));
            }
        }
        suite.add_test_case(test);
    }
    let mut report = quick_junit::Report::new(SUITE);
    report.add_test_suite(suite);
    report.to_string().map_err(|e| e.to_string())
}

/// Writes the JUnit file: a new file renamed into place, never written
/// through what is there.
pub(super) fn write_junit(path: &Path, results: &[(&Case, &Report)]) -> Result<(), String> {
    let xml = junit(results)?;
    dsh_orchestrator::journal::rundir::write_atomic(path, xml.as_bytes()).map_err(|e| e.to_string())
}

/// The step summary's Markdown for `results`.
pub(super) fn summary(results: &[(&Case, &Report)]) -> String {
    let failed = results
        .iter()
        .filter(|(_, r)| matches!(r.verdict, Verdict::Fail(_)))
        .count();
    let mut md = String::new();
    let _ = writeln!(md, "### dsh workflow test\n");
    let _ = writeln!(md, "{} passed, {failed} failed\n", results.len() - failed);
    let _ = writeln!(md, "| | workflow | time | tokens (in / out) | cost |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    for (case, report) in results {
        let mark = match report.verdict {
            Verdict::Ok => "✅",
            Verdict::New => "🆕",
            Verdict::Fail(_) => "❌",
        };
        let time = report
            .elapsed
            .map_or_else(|| "—".into(), |d| format!("{} ms", d.as_millis()));
        let (tokens, cost) = match &report.usage {
            Some(u) => (
                format!("{} / {}", u.input, u.output),
                u.cost_usd
                    .map_or_else(|| "—".into(), |c| format!("${c:.4}")),
            ),
            None => ("—".into(), "—".into()),
        };
        let _ = writeln!(
            md,
            "| {mark} | `{}` | {time} | {tokens} | {cost} |",
            cell(&case.script.display().to_string())
        );
    }
    for (case, report) in results {
        if let Verdict::Fail(lines) = &report.verdict {
            let _ = writeln!(
                md,
                "\n<details><summary><code>{}</code></summary>\n\n```diff\n{}\n```\n\n</details>",
                html(&case.script.display().to_string()),
                lines.join("\n").replace("```", "`\u{200b}``")
            );
        }
    }
    md
}

/// The annotations of the failing workflows: one `::error` line each, on
/// the script (at the run error's line when the error names one).
pub(super) fn annotations(results: &[(&Case, &Report)]) -> String {
    let mut out = String::new();
    for (case, report) in results {
        let Verdict::Fail(lines) = &report.verdict else {
            continue;
        };
        let file = case.script.display().to_string();
        let line = report.line.unwrap_or(1);
        let _ = writeln!(
            out,
            "::error file={},line={line},title={}::{}",
            property(&file),
            property(&format!("dsh workflow test: {file}")),
            data(&lines.join("\n"))
        );
    }
    out
}

/// A workflow command's data: `%`, CR and LF escaped (GitHub's rules).
fn data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: as data, and `:` and `,` too.
fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Text in a Markdown table cell: no pipe or backtick breaks the table.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('`', "'")
}

/// Text in HTML.
fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The line of the script `script_name` that a run error names
/// (`NAME:LINE:COL`), if it names one.
pub(super) fn error_line(message: &str, script_name: &str) -> Option<u32> {
    let at = message.find(&format!("{script_name}:"))? + script_name.len() + 1;
    let digits: String = message[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("Error: nope\n    at wf.ts:3:7", "wf.ts", Some(3))]
    #[case("wf.ts:12:1: SyntaxError", "wf.ts", Some(12))]
    #[case("no position here", "wf.ts", None)]
    #[case("other.ts:4:2", "wf.ts", None)]
    #[case("wf.ts:0:0", "wf.ts", None)]
    fn the_line_a_run_error_names(
        #[case] message: &str,
        #[case] script: &str,
        #[case] line: Option<u32>,
    ) {
        assert_eq!(error_line(message, script), line);
    }

    #[test]
    fn workflow_command_values_are_escaped() {
        assert_eq!(data("50%\nnext\r"), "50%25%0Anext%0D");
        assert_eq!(property("a:b,c"), "a%3Ab%2Cc");
    }
}
