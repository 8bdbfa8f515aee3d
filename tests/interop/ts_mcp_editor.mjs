// An editor that provides an MCP server over ACP with the official ACP TypeScript SDK's
// McpOverAcpProvider (@agentclientprotocol/sdk/unstable).
//
// Usage: node tests/interop/ts_mcp_editor.mjs -- COMMAND ARGS...
//
// Spawns COMMAND as its ACP agent, registers the server "ts-tools" (tool "shout": upper-cases
// `text`, reporting progress first when asked), initializes, opens a session declaring it and
// prints {"event": "ready", "sessionId": ...}. Every inner MCP request its handler serves is
// printed as {"event": "mcp", "method", "protocolVersion", "clientInfo"}. Ends when its stdin
// closes (the agent is closed first).

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { client, methods, McpOverAcpProvider, McpProtocolError, ndJsonStream } from "@agentclientprotocol/sdk/unstable";

const command = process.argv.slice(process.argv.indexOf("--") + 1);
const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);
const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });

const SHOUT = {
  name: "shout",
  description: "Upper-case the text.",
  inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
};

async function handler(cx) {
  print({ event: "mcp", method: cx.method, protocolVersion: cx.protocolVersion, clientInfo: cx.clientInfo ?? null });
  switch (cx.method) {
    case "server/discover":
      return {
        result: {
          supportedVersions: ["2026-07-28"],
          capabilities: { tools: {} },
          resultType: "complete",
          ttlMs: 0,
          cacheScope: "private",
          _meta: { "io.modelcontextprotocol/serverInfo": { name: "ts-tools", version: "2.4.0" } },
        },
      };
    case "tools/list":
      return { result: { tools: [SHOUT], resultType: "complete", ttlMs: 0, cacheScope: "private" } };
    case "tools/call": {
      const token = cx.params?._meta?.progressToken;
      if (token !== undefined) {
        await cx.notify("notifications/progress", { progressToken: token, progress: 1, total: 1 });
      }
      const text = String(cx.params?.arguments?.text ?? "").toUpperCase();
      return { result: { content: [{ type: "text", text }], resultType: "complete" } };
    }
    default:
      throw new McpProtocolError(-32601, `Method not found: ${cx.method}`);
  }
}

const provider = new McpOverAcpProvider();
const app = client({ name: "ts-mcp-editor" })
  .onRequest(methods.client.mcp.message, provider.handleRequest)
  .onNotification(methods.client.session.update, () => {});
const connection = app.connect(ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)));
const registration = provider.registerServer(connection.agent, { name: "ts-tools", serverId: "ts-tools-1", handler });

await connection.agent.request(methods.agent.initialize, {
  protocolVersion: 1,
  clientCapabilities: {},
  clientInfo: { name: "ts-mcp-editor", version: "2.4.0" },
});
const session = await connection.agent.request(methods.agent.session.new, {
  cwd: process.cwd(),
  mcpServers: [registration.declaration],
});
print({ event: "ready", sessionId: session.sessionId });

process.stdin.resume();
process.stdin.on("end", () => {
  child.stdin.end();
  child.once("exit", () => process.exit(0));
});
