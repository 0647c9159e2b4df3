"""A real MCP client (the official Python SDK, `mcp`) for crates/knife/tests/e2e_mcp.rs.

Usage: client.py <endpoint> <authorization header> <mode> [target thread id]
  mode `full`:  initialize, list tools, call threads_list and thread_status, and with a
                target thread call thread_send_message on it.
  mode `probe`: initialize and list tools; a failure is reported, not raised.
Prints one JSON object on stdout.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def text_of(result):
    return json.loads(result.content[0].text)


def describe(exc):
    """Flattens exception groups; returns the messages and any HTTP status seen."""
    messages, statuses = [], []
    stack = [exc]
    while stack:
        e = stack.pop()
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
            continue
        messages.append(f"{type(e).__name__}: {e}")
        response = getattr(e, "response", None)
        code = getattr(response, "status_code", None)
        if code is not None:
            statuses.append(code)
        if e.__cause__ is not None:
            stack.append(e.__cause__)
    return messages, statuses


# Every HTTP status the client saw (the SDK reports a 401 as a generic error).
STATUSES = []


async def record_status(response):
    STATUSES.append(response.status_code)


async def run(endpoint, auth, mode, target):
    out = {}
    client = create_mcp_http_client(headers={"Authorization": auth})
    client.event_hooks["response"].append(record_status)
    async with client:
        async with streamable_http_client(endpoint, http_client=client) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                out["tools"] = sorted(t.name for t in tools.tools)
                if mode == "full":
                    out["threads_list"] = text_of(await session.call_tool("threads_list", {}))
                    out["thread_status"] = text_of(await session.call_tool("thread_status", {}))
                    if target:
                        sent = await session.call_tool(
                            "thread_send_message",
                            {"thread_id": target, "text": "Hello from another thread."},
                        )
                        out["send"] = text_of(sent)
    return out


def main():
    endpoint, auth, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    target = sys.argv[4] if len(sys.argv) > 4 else None
    try:
        out = asyncio.run(asyncio.wait_for(run(endpoint, auth, mode, target), 30))
        out["ok"] = True
    except BaseException as e:  # noqa: BLE001 - reported to the Rust test
        if mode != "probe":
            raise
        messages, statuses = describe(e)
        out = {"ok": False, "errors": messages, "statuses": statuses}
    out["http_statuses"] = STATUSES
    print(json.dumps(out))


if __name__ == "__main__":
    main()
