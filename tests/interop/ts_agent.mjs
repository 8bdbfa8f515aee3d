// Echo agent built on the official ACP TypeScript SDK (@agentclientprotocol/sdk).
//
// Usage: node tests/interop/ts_agent.mjs [--v2]
//
// Speaks ACP v1 over its own stdin/stdout (the SDK's default entrypoint), or the draft v2
// with --v2 (@agentclientprotocol/sdk/experimental/v2). Session ids are random UUIDs; message
// and tool call ids are counters. A prompt is echoed back as agent_message_chunk updates
// ("Echo: ", then the prompt text); a prompt containing "permission" first asks
// session/request_permission and appends " [permission: OPTION_ID]". In v2 a turn is:
// user_message, state_update running, (tool_call_update, requires_action, the request,
// running), the chunks, state_update idle with stopReason end_turn, then the prompt response.
// Diagnostics go to stderr.

import { randomUUID } from "node:crypto";
import { Readable, Writable } from "node:stream";

const V2 = process.argv.slice(2).includes("--v2");
const acp = await import(
  V2 ? "@agentclientprotocol/sdk/experimental/v2" : "@agentclientprotocol/sdk"
);
const { methods } = acp;

const NAME = "ts-echo-agent";
const OPTIONS = [
  { optionId: "allow", name: "Allow once", kind: "allow_once" },
  { optionId: "reject", name: "Reject once", kind: "reject_once" },
];

const sessions = new Map(); // sessionId -> cwd
let counter = 0;
const nextId = (prefix) => `${prefix}-${++counter}`;

function promptText(blocks) {
  return blocks
    .filter((b) => b.type === "text")
    .map((b) => b.text)
    .join("");
}

function knownSession(sessionId) {
  if (!sessions.has(sessionId)) throw acp.RequestError.sessionNotFound(sessionId);
}

const app = acp.agent({ name: NAME });

app.onRequest(methods.agent.initialize, ({ params }) => {
  const info = { name: NAME, version: "2.4.0" };
  if (!V2) {
    return {
      protocolVersion: 1,
      agentCapabilities: { loadSession: false },
      authMethods: [],
      agentInfo: info,
    };
  }
  // Advertising `session` obliges the v2 baseline: session/list, resume and close.
  return { protocolVersion: params.protocolVersion, info, capabilities: { session: {} }, authMethods: [] };
});

app.onRequest(methods.agent.session.new, ({ params }) => {
  const sessionId = randomUUID();
  sessions.set(sessionId, params.cwd);
  return { sessionId };
});

if (V2) {
  app.onRequest(methods.agent.session.list, () => ({
    sessions: [...sessions].map(([sessionId, cwd]) => ({ sessionId, cwd })),
  }));
  app.onRequest(methods.agent.session.resume, ({ params }) => {
    knownSession(params.sessionId);
    return {};
  });
  app.onRequest(methods.agent.session.close, ({ params }) => {
    sessions.delete(params.sessionId);
    return {};
  });
}

app.onNotification(methods.agent.session.cancel, () => {});

app.onRequest(methods.agent.session.prompt, async ({ params, client }) => {
  const { sessionId } = params;
  knownSession(sessionId);
  const text = promptText(params.prompt);
  const update = (u) => client.notify(methods.client.session.update, { sessionId, update: u });
  const state = (s, extra = {}) => update({ sessionUpdate: "state_update", state: s, ...extra });

  const userMessageId = V2 ? nextId("msg") : undefined;
  if (V2) {
    await update({ sessionUpdate: "user_message", messageId: userMessageId, content: params.prompt });
    await state("running");
  }
  let suffix = "";
  if (text.toLowerCase().includes("permission")) {
    const toolCall = {
      toolCallId: nextId("call"),
      title: "Echo the prompt",
      kind: "other",
      status: "pending",
      rawInput: { text },
    };
    let request;
    if (V2) {
      await update({ sessionUpdate: "tool_call_update", ...toolCall });
      await state("requires_action");
      request = {
        sessionId,
        title: "Echo the prompt?",
        subject: { type: "tool_call", toolCall },
        options: OPTIONS,
      };
    } else {
      request = { sessionId, toolCall, options: OPTIONS };
    }
    const answer = await client.request(methods.client.session.requestPermission, request);
    const outcome = answer.outcome;
    suffix = ` [permission: ${outcome.outcome === "selected" ? outcome.optionId : outcome.outcome}]`;
    if (V2) await state("running");
  }
  const agentMessageId = V2 ? nextId("msg") : undefined;
  for (const chunk of ["Echo: ", text, suffix]) {
    if (!chunk) continue;
    const u = { sessionUpdate: "agent_message_chunk" };
    if (V2) u.messageId = agentMessageId;
    u.content = { type: "text", text: chunk };
    await update(u);
  }
  if (V2) {
    await state("idle", { stopReason: "end_turn" });
    return { messageId: userMessageId };
  }
  return { stopReason: "end_turn" };
});

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const connection = app.connect(stream);
connection.closed.then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${NAME}: ${error?.stack ?? error}\n`);
    process.exit(1);
  },
);
