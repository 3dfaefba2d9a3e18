"""A server written with the official Python SDK (`mcp` from PyPI): its `MCPServer` (2.x, which
speaks both eras) or `FastMCP` (1.x, the handshake era), over Streamable HTTP on 127.0.0.1.

Usage: python3 echo_server.py PORT MODE DESC_FILE; MODE "sse" (the SDK's default answers) or
"json" (json_response=True). The echo tool's description is read from DESC_FILE at start.
"""
import sys

port, mode = int(sys.argv[1]), sys.argv[2]
with open(sys.argv[3]) as f:
    desc = f.read().strip()
try:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("py-sdk-echo")

    def run():
        server.run(transport="streamable-http", host="127.0.0.1", port=port,
                   json_response=(mode == "json"))
except ImportError:
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("py-sdk-echo", host="127.0.0.1", port=port, json_response=(mode == "json"))

    def run():
        server.run(transport="streamable-http")


@server.tool(description=desc)
def echo(text: str) -> str:
    return f"echo: {text}"


run()
