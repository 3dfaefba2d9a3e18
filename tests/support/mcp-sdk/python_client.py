"""Drives `acode-run mcp` over stdio with the official Python SDK's `Client` in one negotiation
mode (`legacy`, `auto` or a pinned revision) and prints one JSON report for the Rust test
(tests/cli/mcp/sdk.rs) to check: the negotiated version, the tools listed, every tool called
(successes and refusals), and the protocol errors.

Usage: python_client.py ACODE_RUN WORKSPACE MODE RUN_ID
"""

import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters


def content(result):
    """A CallToolResult as plain data."""
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "text": "".join(getattr(c, "text", "") for c in result.content),
    }


async def main(binary, workspace, mode, run_id):
    params = StdioServerParameters(
        command=binary, args=["mcp"], cwd=workspace, env={"PATH": os.environ.get("PATH", "")}
    )
    report = {"mode": mode, "calls": {}, "errors": {}}
    async with Client(params, mode=mode) as client:
        report["protocol_version"] = client.protocol_version
        report["server"] = client.server_info.name if client.server_info else None
        listed = await client.list_tools()
        report["tools"] = [t.name for t in listed.tools]
        report["with_output_schema"] = [t.name for t in listed.tools if t.output_schema]
        calls = {
            "validate_good": ("validate_plan", {"path": "good.json"}),
            "validate_bad": ("validate_plan", {"path": "bad.json"}),
            "preview": ("preview_plan", {"path": "good.json"}),
            "preview_bad": ("preview_plan", {"path": "bad.json"}),
            "submit": (
                "submit_plan",
                {
                    "path": f"sdk-{mode}.json",
                    "plan": {
                        "plan_id": "sdk",
                        "steps": [
                            {
                                "step_id": "w",
                                "tool": "file_write",
                                "arguments": {"path": "sdk.txt", "contents": "sdk\n"},
                            }
                        ],
                    },
                },
            ),
            "submit_bad": (
                "submit_plan",
                {"path": "worse.json", "plan": '{"plan_id": "w",\n "steps": [{"step_id": "a", "tool": "nope"}]}'},
            ),
            "status": ("plan_status", {"path": "good.json"}),
            "list_runs": ("list_runs", {}),
            "show_run": ("show_run", {"run_id": run_id}),
            "show_run_missing": ("show_run", {"run_id": "ffffffff"}),
        }
        for label, (tool, arguments) in calls.items():
            report["calls"][label] = content(await client.call_tool(tool, arguments))
        errors = {
            "unknown_tool": ("run_plan", {"path": "good.json"}),
            "bad_arguments": ("validate_plan", {"paht": "good.json"}),
        }
        for label, (tool, arguments) in errors.items():
            try:
                result = await client.call_tool(tool, arguments)
                report["errors"][label] = {"no_error": content(result)}
            except Exception as e:  # the SDK's error for a JSON-RPC error reply
                error = getattr(e, "error", None)
                report["errors"][label] = {
                    "type": type(e).__name__,
                    "code": getattr(error, "code", None),
                    "message": getattr(error, "message", str(e)),
                }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
