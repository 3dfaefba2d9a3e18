#!/bin/sh
# The adapter the official MCP conformance suite (@modelcontextprotocol/conformance) runs as its
# client: `conformance_client.sh URL`, the scenario in MCP_CONFORMANCE_SCENARIO. It makes a
# workspace whose policy names the suite's server as a remote MCP server (its host:port allowed),
# and approves and runs a plan that calls the scenario's tool with acode-run ($ACODE_RUN).
set -eu
url="$1"
acode="${ACODE_RUN:-acode-run}"
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
hostport=$(printf '%s' "$url" | sed -E 's#^[a-z]+://([^/]+).*#\1#')
case "${MCP_CONFORMANCE_SCENARIO:-}" in
  tools_call) tool=add_numbers; args='{"a": 2, "b": 3}' ;;
  sse-retry) tool=test_reconnection; args='{}' ;;
  # The server offers no tool: the client's part is the handshake and tools/list, what
  # `acode-run mcp tools` does (approving would fail on the missing tool).
  *) tool=none; args='{}'; list_only=1 ;;
esac
cat > "$ws/acode-policy.json" <<JSON
{"network": {"allow": ["$hostport"]},
 "mcp": {"servers": {"suite": {"url": "$url", "tools": ["$tool"], "confirm": false,
                               "call_timeout_s": 20}}}}
JSON
cat > "$ws/plan.json" <<JSON
{"plan_id": "conformance", "steps": [{"step_id": "call", "tool": "mcp__suite__$tool", "arguments": $args}]}
JSON
cd "$ws"
if [ -n "${list_only:-}" ]; then
  "$acode" mcp tools
  exit 0
fi
"$acode" approve plan.json --by conformance
"$acode" run plan.json --sandbox none
