#!/bin/sh
# The adapter the official MCP conformance suite (@modelcontextprotocol/conformance) runs as its
# client: `conformance_client.sh URL`, the scenario in MCP_CONFORMANCE_SCENARIO and its data, if
# any, in MCP_CONFORMANCE_CONTEXT. It makes a workspace whose policy names the suite's server as a
# remote MCP server (its host:port allowed), and approves and runs a plan that makes the
# scenario's tool calls with acode-run ($ACODE_RUN) — or, where the scenario's server offers
# nothing to call, lists its tools (`acode-run mcp tools`), which is the client's whole part.
# JSON is read and written with node, which the suite itself runs on.
set -eu
url="$1"
acode="${ACODE_RUN:-acode-run}"
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
hostport=$(printf '%s' "$url" | sed -E 's#^[a-z]+://([^/]+).*#\1#')
cd "$ws"

# policy TOOL...: the suite's server with these tools allowed.
policy() {
  node -e '
    const [url, hostport, ...tools] = process.argv.slice(1);
    const policy = {network: {allow: [hostport]},
      mcp: {servers: {suite: {url, tools, confirm: false, call_timeout_s: 20}}}};
    require("fs").writeFileSync("acode-policy.json", JSON.stringify(policy, null, 2));
  ' "$url" "$hostport" "$@"
}

# plan CALLS: a plan with one step per call of CALLS, a JSON array of {name, arguments}; the
# policy allows each tool called. An argument whose value is null is left out: acode-run checks
# arguments against the tool's schema, where null is not a string, an integer or a boolean, and
# a plan says "no value" by leaving the argument out (which is also when SEP-2243 omits the
# argument's header, what the calls with nulls test).
plan() {
  node -e '
    const calls = JSON.parse(process.argv[1]);
    const steps = calls.map((c, i) => ({
      step_id: "call" + (i + 1),
      tool: "mcp__suite__" + c.name,
      arguments: Object.fromEntries(
        Object.entries(c.arguments || {}).filter(([, v]) => v !== null)),
    }));
    require("fs").writeFileSync("plan.json",
      JSON.stringify({plan_id: "conformance", steps}, null, 2));
    console.log([...new Set(calls.map((c) => c.name))].join(" "));
  ' "$1"
}

run() {
  # shellcheck disable=SC2046 # the tool names are words
  policy $(plan "$1")
  "$acode" approve plan.json --by conformance
  "$acode" run plan.json --sandbox none
}

case "${MCP_CONFORMANCE_SCENARIO:-}" in
  tools_call) run '[{"name": "add_numbers", "arguments": {"a": 2, "b": 3}}]' ;;
  sse-retry) run '[{"name": "test_reconnection", "arguments": {}}]' ;;
  # The calls, with the values to encode, come in the context.
  http-custom-headers)
    run "$(node -e 'console.log(JSON.stringify(JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT).toolCalls))')" ;;
  # One valid tool beside ten whose x-mcp-header marks break the rules: the valid one is kept
  # (and called), the others are left out of what the client sees.
  http-invalid-tool-headers)
    run '[{"name": "valid_tool", "arguments": {"region": "us-west1"}}]' ;;
  # The focal tool's inputSchema, as acode-run received it (and would pin it), is sent back
  # to the echo tool: the suite checks no 2020-12 keyword was lost on the way.
  json-schema-2020-12-preservation)
    policy json_schema_2020_12_tool json_schema_echo
    "$acode" mcp tools --json > tools.json
    run "$(node -e '
      const report = JSON.parse(require("fs").readFileSync("tools.json", "utf8"));
      const tool = report.servers[0].tools.find((t) => t.name === "json_schema_2020_12_tool");
      console.log(JSON.stringify([{name: "json_schema_echo", arguments: {schema: tool.input_schema}}]));
    ')" ;;
  # The server offers no tool to call: the client's part is the handshake (or discovery) and
  # tools/list, what `acode-run mcp tools` does (approving would fail on the missing tool).
  *)
    policy none
    "$acode" mcp tools ;;
esac
