"""A real MCP client for `tests/mcp.rs`: the official Python SDK (`mcp`
from PyPI) drives `dsh workflow mcp` over stdio or streamable HTTP.

Usage: client.py SCENARIO (stdio DSH ARGS... | http URL [TOKEN])

It prints one JSON object on stdout: what the scenario saw (tool results'
structured content, their error flags and texts, the progress
notifications that arrived). The Rust test asserts on it.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def seen(result):
    """A tool result as the test reads it."""
    text = "".join(getattr(c, "text", "") for c in result.content)
    return {
        "isError": bool(result.is_error),
        "structured": result.structured_content,
        "text": text,
    }


INLINE = """
export const meta = { name: "mcp-inline", description: "written by the calling model" };
phase("Fan out");
log("starting " + args.items.length);
const answers = await parallel(args.items.map((item) => () => agent("Say " + item, { label: "say " + item })));
phase("Sum up");
return { answers, count: answers.length };
"""

SLOW = """
phase("Wait");
const a = await agent("slow answer", { label: "slow" });
return a;
"""


async def status_until_settled(s, run_id, progress):
    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    for _ in range(120):
        r = await s.call_tool(
            "workflow_status",
            {"runId": run_id, "waitSeconds": 5},
            progress_callback=on_progress,
        )
        st = r.structured_content
        if st is None or st.get("status") != "running":
            return seen(r)
    raise RuntimeError("the run never settled")


async def scenario_inline(s):
    out = {}
    tools = await s.list_tools()
    out["tools"] = sorted(t.name for t in tools.tools)
    out["startDescription"] = next(
        t.description for t in tools.tools if t.name == "workflow_start"
    )
    start = await s.call_tool(
        "workflow_start", {"script": INLINE, "args": {"items": ["a", "b", "c"]}}
    )
    out["start"] = seen(start)
    if start.structured_content is None:
        print(json.dumps(out))
        sys.exit(1)
    run_id = start.structured_content["runId"]
    progress = []
    out["status"] = await status_until_settled(s, run_id, progress)
    out["progress"] = progress
    out["result"] = seen(await s.call_tool("workflow_result", {"runId": run_id}))
    out["runs"] = seen(await s.call_tool("workflow_runs", {"limit": 5}))
    out["list"] = seen(await s.call_tool("workflow_list", {}))
    resources = await s.list_resources()
    out["resources"] = sorted(str(r.uri) for r in resources.resources)
    res = await s.read_resource(f"dsh://runs/{run_id}/result")
    out["resourceResult"] = json.loads(res.contents[0].text)
    return out


async def scenario_cancel_resume(s):
    out = {}
    start = await s.call_tool("workflow_start", {"script": SLOW})
    out["start"] = seen(start)
    run_id = start.structured_content["runId"]
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    # A long wait on a run that does not end: progress arrives meanwhile,
    # and the status says running at the end of the wait.
    out["waiting"] = seen(
        await s.call_tool(
            "workflow_status",
            {"runId": run_id, "waitSeconds": 3},
            progress_callback=on_progress,
        )
    )
    out["progress"] = progress
    out["early"] = seen(await s.call_tool("workflow_result", {"runId": run_id}))
    out["cancel"] = seen(await s.call_tool("workflow_cancel", {"runId": run_id}))
    out["cancelled"] = await status_until_settled(s, run_id, [])
    out["cancelledResult"] = seen(
        await s.call_tool("workflow_result", {"runId": run_id})
    )
    out["resume"] = seen(await s.call_tool("workflow_resume", {"runId": run_id}))
    out["resumed"] = await status_until_settled(s, run_id, [])
    out["resumedResult"] = seen(
        await s.call_tool("workflow_result", {"runId": run_id})
    )
    return out


async def scenario_hostile(s):
    out = {}
    calls = {
        "noSource": {},
        "twoSources": {"script": "return 1;", "name": "x"},
        "parseError": {"script": "const x = ;\nreturn x;"},
        "outside": {"scriptPath": "/etc/passwd"},
        "missing": {"scriptPath": "no-such-file.ts"},
        "unknownName": {"name": "no-such-workflow"},
        "tooManyAgents": {"script": "return 1;", "maxAgents": 1000000},
        "tooLong": {"script": "return 1;", "timeoutSeconds": 10**9},
        "badBudget": {"script": "return 1;", "budgetUsd": -1},
        "unknownField": {"script": "return 1;", "sandbox": "off"},
        "hugeScript": {"script": "//" + "x" * (2 * 1024 * 1024)},
        "wrongType": {"script": 42},
    }
    for key, args in calls.items():
        try:
            out[key] = seen(await s.call_tool("workflow_start", args))
        except Exception as e:  # a protocol error: the server said no
            out[key] = {"protocolError": str(e)}
    for key, (tool, args) in {
        "statusUnknown": ("workflow_status", {"runId": "nope"}),
        "resultUnknown": ("workflow_result", {"runId": "nope"}),
        "cancelUnknown": ("workflow_cancel", {"runId": "../../etc"}),
    }.items():
        try:
            out[key] = seen(await s.call_tool(tool, args))
        except Exception as e:
            out[key] = {"protocolError": str(e)}
    # A flood of starts: past --max-runs each is refused, none is lost.
    starts = await asyncio.gather(
        *[s.call_tool("workflow_start", {"script": SLOW}) for _ in range(6)]
    )
    out["flood"] = [seen(r) for r in starts]
    for r in starts:
        if not r.is_error:
            await s.call_tool("workflow_cancel", {"runId": r.structured_content["runId"]})
    # Still up and answering.
    out["after"] = sorted(t.name for t in (await s.list_tools()).tools)
    return out


SCENARIOS = {
    "inline": scenario_inline,
    "cancel-resume": scenario_cancel_resume,
    "hostile": scenario_hostile,
}


async def main():
    scenario = SCENARIOS[sys.argv[1]]
    mode = sys.argv[2]
    if mode == "stdio":
        params = StdioServerParameters(command=sys.argv[3], args=sys.argv[4:])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                out = await scenario(s)
    else:
        import httpx2 as httpx
        from mcp.client.streamable_http import streamable_http_client

        url = sys.argv[3]
        headers = {"Authorization": f"Bearer {sys.argv[4]}"} if len(sys.argv) > 4 else {}
        async with httpx.AsyncClient(headers=headers, timeout=120) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    out = await scenario(s)
    print(json.dumps(out))


asyncio.run(main())
