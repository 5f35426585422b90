// A plain MCP host on the official TypeScript SDK (no contract code), driven line by line.
//
// usage: node mcp_host.mjs NODE_MODULES_PARENT
// stdin: one JSON command a line; stdout: one JSON answer a line ({"ok": true, ...} or
// {"ok": false, "error": "..."}). Commands:
//   {"op": "connect", "transport": "stdio", "command": ..., "args": [...], "version": ...,
//    "env": {...}, "cwd": ...}                   env and cwd optional, as a host's config gives
//   {"op": "connect", "transport": "http", "url": ..., "version": ...}
//   {"op": "list"}                               the tools, as the host sees them
//   {"op": "call", "name": ..., "arguments": {...}, "meta": {...}}   client.callTool, as hosts do
//   {"op": "subscribe", "uri": ...}              resources/subscribe
//   {"op": "updates", "uri": ..., "timeout_ms": N}   wait for resources/updated of uri; the
//                                                uris heard, and each notification's _meta (notes)
//   {"op": "read", "uri": ...}                   resources/read, the first text content
//   {"op": "poll", "cursor": ..., "limit": N}    the events mode: read contract://events after
//                                                cursor (both optional), the page parsed
//   {"op": "close"}
// "version" is the protocolVersion the host offers in initialize (the SDK offers its latest
// otherwise); the answer names the one negotiated.
import { createInterface } from "node:readline";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.argv[2], "package.json"));
const sdk = (p) => import(require.resolve(`@modelcontextprotocol/sdk/${p}`));
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { ResourceUpdatedNotificationSchema, SUPPORTED_PROTOCOL_VERSIONS } = await sdk("types.js");

let client = null;
let negotiated = null;
let initialized = null; // the initialize result as it came, before the SDK's schema parsed it
const updates = [];
const notes = []; // {uri, meta}: each resources/updated as it came, its _meta included
let heard = null; // resolves the pending "updates" wait

function offering(transport, version) {
  // The SDK always offers its latest revision: ask for the chosen one, and note the answer.
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message.method === "initialize" && version) message.params.protocolVersion = version;
    return send(message, options);
  };
  const original = Object.getOwnPropertyDescriptor(transport, "onmessage");
  let handler = original ? original.value : undefined;
  Object.defineProperty(transport, "onmessage", {
    configurable: true,
    get() { return handler; },
    set(next) {
      handler = (msg, extra) => {
        if (msg && msg.result && msg.result.protocolVersion) {
          negotiated = msg.result.protocolVersion;
          initialized = msg.result;
        }
        return next(msg, extra);
      };
    },
  });
  return transport;
}

const ops = {
  async connect(cmd) {
    const transport = cmd.transport === "stdio"
      ? new StdioClientTransport({ command: cmd.command, args: cmd.args, env: cmd.env,
          cwd: cmd.cwd, stderr: "ignore" })
      : new StreamableHTTPClientTransport(new URL(cmd.url));
    client = new Client({ name: "ts-sdk-plain-host", version: "0.0.1" });
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      updates.push(n.params.uri);
      notes.push({ uri: n.params.uri, meta: n.params._meta || {} });
      if (heard) heard();
    });
    await client.connect(offering(transport, cmd.version));
    const wire = (initialized && initialized.capabilities) || {};
    return { negotiated, supported: SUPPORTED_PROTOCOL_VERSIONS,
      server: client.getServerVersion(), extensions: wire.extensions || null,
      experimental: wire.experimental || null,
      capabilities: client.getServerCapabilities() || {} };
  },
  async list() {
    const { tools } = await client.listTools();
    return { tools: tools.map((t) => ({ name: t.name, outputSchema: t.outputSchema || null,
      meta: t._meta || {} })) };
  },
  async call(cmd) {
    const result = await client.callTool({ name: cmd.name, arguments: cmd.arguments,
      ...(cmd.meta ? { _meta: cmd.meta } : {}) });
    return { isError: !!result.isError,
      text: result.content.filter((c) => c.type === "text").map((c) => c.text).join(""),
      structuredContent: result.structuredContent ?? null, meta: result._meta || {} };
  },
  async subscribe(cmd) {
    await client.subscribeResource({ uri: cmd.uri });
    return {};
  },
  async updates(cmd) {
    const deadline = Date.now() + cmd.timeout_ms;
    while (!updates.includes(cmd.uri) && Date.now() < deadline) {
      await new Promise((resolve) => {
        heard = resolve;
        setTimeout(resolve, Math.max(0, deadline - Date.now()));
      });
    }
    return { updates: updates.splice(0), notes: notes.splice(0) };
  },
  async read(cmd) {
    const { contents } = await client.readResource({ uri: cmd.uri });
    return { mimeType: contents[0].mimeType, text: contents[0].text };
  },
  async poll(cmd) {
    const query = new URLSearchParams();
    if (cmd.cursor) query.set("cursor", cmd.cursor);
    if (cmd.limit) query.set("limit", String(cmd.limit));
    const uri = "contract://events" + (query.size ? `?${query}` : "");
    const { contents } = await client.readResource({ uri });
    return { mimeType: contents[0].mimeType, page: JSON.parse(contents[0].text) };
  },
  async close() {
    if (client) await client.close();
    client = null;
    return {};
  },
};

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  let answer;
  try {
    const cmd = JSON.parse(line);
    answer = { ok: true, ...(await ops[cmd.op](cmd)) };
  } catch (e) {
    answer = { ok: false, error: String(e && e.message ? e.message : e).slice(0, 2000) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
if (client) await client.close();
process.exit(0);
