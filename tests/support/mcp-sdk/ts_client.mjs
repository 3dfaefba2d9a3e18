// Drives `acode-run mcp` over stdio with an official TypeScript SDK client and prints one JSON
// report for the Rust test (tests/cli/mcp/sdk.rs): the negotiated version, the tools listed,
// every tool called (successes and refusals), and the protocol errors.
//
// Usage: node ts_client.mjs PACKAGE_DIR FLAVOUR MODE ACODE_RUN WORKSPACE RUN_ID
//   FLAVOUR `sdk`: `@modelcontextprotocol/sdk` (1.x, the handshake era only; MODE must be legacy);
//   FLAVOUR `client`: `@modelcontextprotocol/client` (2.x; MODE legacy, auto, or a pinned revision).

import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [packageDir, flavour, mode, binary, workspace, runId] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.join(packageDir, 'node_modules', p)).href);

let Client, StdioClientTransport;
if (flavour === 'sdk') {
  ({ Client } = await load('@modelcontextprotocol/sdk/dist/esm/client/index.js'));
  ({ StdioClientTransport } = await load('@modelcontextprotocol/sdk/dist/esm/client/stdio.js'));
} else {
  ({ Client } = await load('@modelcontextprotocol/client/dist/index.mjs'));
  ({ StdioClientTransport } = await load('@modelcontextprotocol/client/dist/stdio.mjs'));
}

const options = {};
if (flavour === 'client') {
  options.versionNegotiation = {
    mode: mode === 'legacy' || mode === 'auto' ? mode : { pin: mode },
  };
}
const client = new Client({ name: 'acode-run-sdk-test', version: '1.0.0' }, options);
const transport = new StdioClientTransport({
  command: binary,
  args: ['mcp'],
  cwd: workspace,
  env: { PATH: process.env.PATH ?? '' },
  stderr: 'ignore',
});
// The version the handshake agreed, as the 1.x client hands it to its transport.
let agreed = null;
transport.setProtocolVersion = (v) => { agreed = v; };
await client.connect(transport);

const content = (r) => ({
  is_error: Boolean(r.isError),
  structured: r.structuredContent ?? null,
  text: (r.content ?? []).map((c) => c.text ?? '').join(''),
});
const report = { mode, calls: {}, errors: {} };
report.protocol_version =
  typeof client.getNegotiatedProtocolVersion === 'function'
    ? client.getNegotiatedProtocolVersion()
    : agreed;
report.server = client.getServerVersion()?.name ?? null;
const listed = await client.listTools();
report.tools = listed.tools.map((t) => t.name);
report.with_output_schema = listed.tools.filter((t) => t.outputSchema).map((t) => t.name);
const calls = {
  validate_good: ['validate_plan', { path: 'good.json' }],
  validate_bad: ['validate_plan', { path: 'bad.json' }],
  preview: ['preview_plan', { path: 'good.json' }],
  preview_bad: ['preview_plan', { path: 'bad.json' }],
  submit: ['submit_plan', {
    path: `sdk-${flavour}-${mode}.json`,
    plan: { plan_id: 'sdk', steps: [
      { step_id: 'w', tool: 'file_write', arguments: { path: 'sdk.txt', contents: 'sdk\n' } }] },
  }],
  submit_bad: ['submit_plan', {
    path: 'worse.json', plan: '{"plan_id": "w",\n "steps": [{"step_id": "a", "tool": "nope"}]}',
  }],
  status: ['plan_status', { path: 'good.json' }],
  list_runs: ['list_runs', {}],
  show_run: ['show_run', { run_id: runId }],
  show_run_missing: ['show_run', { run_id: 'ffffffff' }],
};
for (const [label, [name, args]] of Object.entries(calls)) {
  report.calls[label] = content(await client.callTool({ name, arguments: args }));
}
const errors = {
  unknown_tool: ['run_plan', { path: 'good.json' }],
  bad_arguments: ['validate_plan', { paht: 'good.json' }],
};
for (const [label, [name, args]] of Object.entries(errors)) {
  try {
    report.errors[label] = { no_error: content(await client.callTool({ name, arguments: args })) };
  } catch (e) {
    report.errors[label] = { type: e?.constructor?.name ?? 'Error', code: e?.code ?? null, message: String(e?.message ?? e) };
  }
}
await client.close();
console.log(JSON.stringify(report));
