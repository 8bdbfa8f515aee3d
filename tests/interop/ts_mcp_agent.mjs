// A native MCP-over-ACP agent built on the official ACP TypeScript SDK: it advertises
// `mcpCapabilities.acp` and calls the `acp` servers declared to it with McpOverAcpCaller.
//
// Usage: node tests/interop/ts_mcp_agent.mjs
//
// A prompt "METHOD JSON_PARAMS" (e.g. `tools/call {"name":"echo","arguments":{"text":"hi"}}`)
// is sent to the first declared acp server; the reply is one agent_message_chunk holding
// {"outcome": ..., "notifications": [...]} as JSON (or {"failure": {code, message}} for an
// outer error).

import { Readable, Writable } from "node:stream";
import { agent, methods, McpOverAcpCaller, isMcpServerAcp, ndJsonStream } from "@agentclientprotocol/sdk/unstable";

const caller = new McpOverAcpCaller({ clientInfo: { name: "ts-mcp-agent", version: "2.4.0" } });
const servers = new Map(); // sessionId -> acp serverIds
let sessions = 0;

const app = agent({ name: "ts-mcp-agent" })
  .onNotification(methods.agent.mcp.message, caller.handleNotification)
  .onNotification(methods.agent.session.cancel, () => {})
  .onRequest(methods.agent.initialize, () => ({
    protocolVersion: 1,
    agentCapabilities: { mcpCapabilities: { acp: true } },
    authMethods: [],
  }))
  .onRequest(methods.agent.session.new, ({ params }) => {
    const sessionId = `ts-${++sessions}`;
    servers.set(sessionId, params.mcpServers.filter(isMcpServerAcp).map((s) => s.serverId));
    return { sessionId };
  })
  .onRequest(methods.agent.session.prompt, async ({ params, client: cx }) => {
    const text = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join("");
    const space = text.indexOf(" ");
    const method = space < 0 ? text : text.slice(0, space);
    const inner = space < 0 ? {} : JSON.parse(text.slice(space + 1));
    const [serverId] = servers.get(params.sessionId) ?? [];
    const notifications = [];
    let reply;
    try {
      const outcome = await caller.request(cx, serverId, method, inner, {
        onNotification: (n) => notifications.push(n),
      });
      reply = { outcome, notifications };
    } catch (error) {
      reply = { failure: { code: error.code, message: error.message } };
    }
    await cx.notify(methods.client.session.update, {
      sessionId: params.sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: JSON.stringify(reply) } },
    });
    return { stopReason: "end_turn" };
  });

app.connect(ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin))).closed.then(
  () => process.exit(0),
  () => process.exit(1),
);
