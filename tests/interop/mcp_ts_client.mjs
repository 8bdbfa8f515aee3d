// MCP client built on the official MCP TypeScript SDK (@modelcontextprotocol/sdk 1.x), which
// speaks the handshake-era revisions (initialize, 2025-11-25), as most agents do today.
//
// Usage: node tests/interop/mcp_ts_client.mjs DECLARATION_JSON TOOL ARGUMENTS_JSON
//
// DECLARATION is an ACP MCP server declaration as an agent receives it: `http` (url, headers)
// or stdio (command, args, env). Connects, lists the tools, calls TOOL, and prints one JSON
// line each: {"server": ...}, {"tools": [...]}, {"result": ...}; or {"error": ...} and exit 1.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [declarationJson, tool, argumentsJson] = process.argv.slice(2);
const declaration = JSON.parse(declarationJson);
const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

let transport;
if (declaration.url) {
  const headers = Object.fromEntries((declaration.headers ?? []).map((h) => [h.name, h.value]));
  transport = new StreamableHTTPClientTransport(new URL(declaration.url), { requestInit: { headers } });
} else {
  const env = { ...process.env };
  for (const variable of declaration.env ?? []) env[variable.name] = variable.value;
  transport = new StdioClientTransport({
    command: declaration.command,
    args: declaration.args ?? [],
    env,
    stderr: "inherit",
  });
}

const client = new Client({ name: "ts-mcp-client", version: "1.32.2" });
try {
  await client.connect(transport);
  print({ server: client.getServerVersion(), protocolVersion: transport.protocolVersion ?? null });
  print({ tools: (await client.listTools()).tools });
  print({ result: await client.callTool({ name: tool, arguments: JSON.parse(argumentsJson) }) });
  await client.close();
} catch (error) {
  print({ error: { name: error?.name, code: error?.code, message: error?.message } });
  await client.close().catch(() => {});
  process.exitCode = 1;
}
