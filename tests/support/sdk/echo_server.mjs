// A server written with the official TypeScript SDK: McpServer + StreamableHTTPServerTransport on
// 127.0.0.1. Usage: node ts_server.mjs PORT MODE DESC_FILE; MODE "session" (a session per client,
// SSE answers) or "json" (stateless transport, JSON answers).
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

const [port, mode, descFile] = process.argv.slice(2);
const description = readFileSync(descFile, "utf8").trim();

function build() {
  const server = new McpServer({ name: "ts-sdk-echo", version: "1.0.0" });
  server.registerTool("echo", { description, inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: "text", text: `echo: ${text}` }] }));
  return server;
}

const sessions = new Map();
createServer(async (req, res) => {
  console.error(`${req.method} ${req.url} session=${req.headers["mcp-session-id"] ?? "-"}`);
  let body = "";
  for await (const chunk of req) body += chunk;
  const parsed = body ? JSON.parse(body) : undefined;
  if (mode === "json") {
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    const server = build();
    res.on("close", () => { transport.close(); server.close(); });
    await server.connect(transport);
    return transport.handleRequest(req, res, parsed);
  }
  const id = req.headers["mcp-session-id"];
  let transport = id && sessions.get(id);
  if (!transport) {
    if (parsed?.method !== "initialize") {
      res.writeHead(400, { "Content-Type": "application/json" });
      return res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "Bad Request: no valid session" } }));
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => sessions.set(sid, transport),
    });
    transport.onclose = () => { if (transport.sessionId) sessions.delete(transport.sessionId); };
    await build().connect(transport);
  }
  return transport.handleRequest(req, res, parsed);
}).listen(Number(port), "127.0.0.1", () => console.error(`listening on ${port}`));
