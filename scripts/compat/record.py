#!/usr/bin/env python3
"""Re-records the expected results of the compat scripts from Claude Code.

Each `X.js` here checks one behaviour where dsh follows Claude Code's
runtime (docs/scripts.md, "Claude Code parity"). This runs every script
through the real Claude Code Workflow runtime, offline (../shared/ccref,
see its README: CCREF_CLAUDE must point at an installed claude), and
writes, beside each script:

- `X.fixture.json`: the answers Claude Code's subagents got, one exact
  prompt match per call, so `dsh workflow test` gives dsh the same answers;
- `X.expected.json`: Claude Code's result value and run log (left out for
  a script whose first line says `// compat: no-logs`: its log lines are
  error messages, which each runtime words its own way).

`agentsStarted` in the expected result is dsh's own count (contract §7
defines it: calls that passed validation); Claude Code counts every
`agent()` call, refused ones included, so its count is not compared.

`dsh workflow test scripts/` (run by CI, no Claude Code needed) then checks
dsh against what Claude Code did. Both runtimes run in this directory, so
`workflow("name")` finds the nested workflows of `.claude/workflows/` here
(`dsh workflow test` looks beside each script, never in the user's home).

Usage: python3 scripts/compat/record.py [CCREF_DIR]   (default ../shared/ccref)
"""
import json
import os
import pathlib
import subprocess
import sys

here = pathlib.Path(__file__).resolve().parent
ccref = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else here.parents[2] / "shared" / "ccref")
runner = ccref / "run_cc_workflow.py"
dsh = os.environ.get("DSH", str(here.parents[1] / "target" / "debug" / "dsh"))
if not runner.is_file():
    sys.exit(f"record.py: {runner} not found; pass the ccref directory")

for script in sorted(here.glob("*.js")):
    out = subprocess.run(
        [sys.executable, str(runner), str(script), "{}", "--array-items", "1", "--cwd", str(here)],
        capture_output=True, text=True, check=False,
    )
    try:
        cc = json.loads(out.stdout)
    except json.JSONDecodeError:
        sys.exit(f"{script.name}: Claude Code printed no result:\n{out.stderr[-2000:]}")
    if cc.get("status") != "completed":
        sys.exit(f"{script.name}: Claude Code did not complete: {cc.get('error')}")
    answers = []
    for a in cc.get("agents", []):
        entry = {"match": {"prompt": a["prompt"]}}
        reply = a.get("reply")
        if a.get("schema") is not None:
            entry["structured"] = reply
        else:
            entry["text"] = reply
        answers.append(entry)
    fixture = {"version": 1, "answers": answers}
    base = script.with_suffix("")
    pathlib.Path(f"{base}.fixture.json").write_text(json.dumps(fixture, indent=2) + "\n")
    # dsh's own agentsStarted (see above), from a run on the same answers.
    ran = subprocess.run(
        [dsh, "workflow", "run", str(script), "--fixture", f"{base}.fixture.json",
         "--output", "result", "--events", "none", "--no-journal"],
        capture_output=True, text=True, check=False, cwd=here,
    )
    try:
        started = json.loads(ran.stdout)["agentsStarted"]
    except (json.JSONDecodeError, KeyError):
        sys.exit(f"{script.name}: dsh ({dsh}) gave no result:\n{ran.stderr[-2000:]}")
    expected = {"result": {"value": cc.get("result"), "stopReason": "completed", "agentsStarted": started}}
    if not script.read_text().startswith("// compat: no-logs"):
        expected["events"] = {"logs": cc.get("logs", [])}
    pathlib.Path(f"{base}.expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    logs = len(expected.get("events", {}).get("logs", []))
    print(f"recorded {script.name}: {len(answers)} answer(s), {logs} log line(s)")
