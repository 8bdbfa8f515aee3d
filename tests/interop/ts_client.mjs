// ACP client built on the official ACP TypeScript SDK (@agentclientprotocol/sdk).
//
// Usage: node tests/interop/ts_client.mjs [--v2] [--prompt TEXT]... [--cwd DIR]
//            [--timeout SECONDS] -- COMMAND ARGS...
//
// Spawns COMMAND as an ACP agent over stdio, initializes (protocol v1, or the draft v2 with
// --v2 through @agentclientprotocol/sdk/experimental/v2), opens a session and sends each
// prompt in turn (in v2 a turn ends when both the prompt response and the idle state_update
// have arrived, and the response is recorded then: the v2 SDK resolves the request before it
// has dispatched the notifications that preceded the response on the wire). Permission requests are answered with the allow_once option (cancelled if
// there is none). A transcript is printed to stdout as JSON Lines, in the order observed:
//
//   {"event": "initialize", "result": {...}}
//   {"event": "session_new", "result": {...}}
//   {"event": "update", "params": {...}}                 each session/update
//   {"event": "permission", "params": {...}, "answer": {...}}
//   {"event": "prompt_response", "result": {...}}
//   {"event": "error", "error": {...}}                   then exit status 1
//
// Payloads are as the SDK hands them over (validated). Exit 0 on success, 1 on any error or
// when --timeout (default 20 s) expires, 2 on usage errors. The agent's stderr is inherited.

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

function usage(message) {
  process.stderr.write(`ts_client: ${message}\n`);
  process.exit(2);
}

const argv = process.argv.slice(2);
const split = argv.indexOf("--");
if (split < 0 || split === argv.length - 1) usage("missing -- COMMAND ARGS...");
const command = argv.slice(split + 1);
const prompts = [];
let v2 = false;
let cwd = process.cwd();
let timeout = 20;
for (let i = 0; i < split; i++) {
  const arg = argv[i];
  if (arg === "--v2") v2 = true;
  else if (arg === "--prompt" && i + 1 < split) prompts.push(argv[++i]);
  else if (arg === "--cwd" && i + 1 < split) cwd = argv[++i];
  else if (arg === "--timeout" && i + 1 < split) timeout = Number(argv[++i]);
  else usage(`unexpected argument ${JSON.stringify(arg)}`);
}

const acp = await import(
  v2 ? "@agentclientprotocol/sdk/experimental/v2" : "@agentclientprotocol/sdk"
);
const { methods } = acp;

function emit(event, fields) {
  process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
}

function errorObject(error) {
  if (error && typeof error === "object" && "code" in error) {
    const out = { code: error.code, message: error.message };
    if (error.data !== undefined) out.data = error.data;
    return out;
  }
  return { type: error?.name ?? typeof error, message: String(error?.message ?? error) };
}

const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const childExited = new Promise((resolve) => child.once("exit", resolve));
let finished = false;

async function finish(code) {
  if (finished) return;
  finished = true;
  clearTimeout(watchdog);
  child.stdin.end();
  const grace = setTimeout(() => child.kill("SIGTERM"), 2000);
  const hard = setTimeout(() => child.kill("SIGKILL"), 4000);
  await childExited;
  clearTimeout(grace);
  clearTimeout(hard);
  process.exit(code);
}

function fail(error) {
  if (finished) return;
  emit("error", { error: errorObject(error) });
  void finish(1);
}

const watchdog = setTimeout(
  () => fail({ name: "TimeoutError", message: `no result within ${timeout}s` }),
  timeout * 1000,
);
child.once("error", fail);
child.once("exit", (code, signal) => {
  if (!finished) fail({ name: "AgentExited", message: `agent exited (${code ?? signal})` });
});

// In v2 a prompt turn ends with an idle state_update; resolvers waiting for it, by session.
const idleWaiters = new Map();

const app = acp
  .client({ name: "ts-client" })
  .onNotification(methods.client.session.update, ({ params }) => {
    emit("update", { params });
    const u = params.update;
    if (u.sessionUpdate === "state_update" && u.state === "idle") {
      idleWaiters.get(params.sessionId)?.();
    }
  })
  .onRequest(methods.client.session.requestPermission, ({ params }) => {
    const option = params.options.find((o) => o.kind === "allow_once");
    const answer = option
      ? { outcome: { outcome: "selected", optionId: option.optionId } }
      : { outcome: { outcome: "cancelled" } };
    emit("permission", { params, answer });
    return answer;
  });

const initParams = v2
  ? { protocolVersion: 2, info: { name: "ts-client", version: "2.4.0" }, capabilities: {} }
  : {
      protocolVersion: 1,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: "ts-client", version: "2.4.0" },
    };

const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
try {
  await app.connectWith(stream, async (ctx) => {
    emit("initialize", { result: await ctx.request(methods.agent.initialize, initParams) });
    const session = await ctx.request(methods.agent.session.new, { cwd, mcpServers: [] });
    emit("session_new", { result: session });
    const { sessionId } = session;
    for (const text of prompts) {
      const idle = v2 ? new Promise((resolve) => idleWaiters.set(sessionId, resolve)) : null;
      const result = await ctx.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text }],
      });
      // The v2 SDK resolves the request before it has dispatched the updates that preceded
      // the response on the wire: record the response once the turn's idle update is in.
      if (idle) await idle;
      emit("prompt_response", { result });
    }
  });
} catch (error) {
  fail(error);
}
await finish(0);
