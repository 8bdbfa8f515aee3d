// Runs @thinkwell/conductor over this process's stdin/stdout, so bench/roundtrip.py can
// measure it exactly like `conductor run`. Usage: node thinkwell_stdio.mjs CHAIN.json
// where CHAIN.json is {"proxies": [[cmd, ...args], ...], "agent": [cmd, ...args]}.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { Conductor, fromCommands } from "@thinkwell/conductor";

const chain = JSON.parse(readFileSync(process.argv[2], "utf8"));
const spec = ([command, ...args]) => ({ command, args });

const editor = {
  send(message) {
    process.stdout.write(JSON.stringify(message) + "\n");
  },
  messages: (async function* () {
    for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
      if (line.trim()) yield JSON.parse(line);
    }
  })(),
  async close() {},
};

const conductor = new Conductor({
  instantiator: fromCommands([...chain.proxies.map(spec), spec(chain.agent)]),
  logging: { level: "error" },
});
await conductor.connect({ connect: async () => editor });
await conductor.shutdown?.();
process.exit(0);
