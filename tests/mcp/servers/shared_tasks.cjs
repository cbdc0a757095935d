// A 2025-11-25 MCP server on the official TypeScript SDK whose tasks outlive the session
// that made them, over streamable HTTP on 127.0.0.1: every session shares one task store,
// and tasks are made without a session id, so a client that connects later (another
// process) can poll a task and fetch its result.
//
//   NODE_PATH=.ci/node/node_modules node tests/mcp/servers/shared_tasks.cjs PORT
//
// Tool "brew" (task support required): a task that completes BREW_MS (default 1500) ms later.
const http = require("node:http");
const { randomUUID } = require("node:crypto");
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");
const { InMemoryTaskStore, InMemoryTaskMessageQueue } = require("@modelcontextprotocol/sdk/experimental/tasks");
const { z } = require("zod");

class SharedTaskStore extends InMemoryTaskStore {
  createTask(params, requestId, request, _sessionId) {
    return super.createTask(params, requestId, request, undefined);
  }
}

const store = new SharedTaskStore();
const queue = new InMemoryTaskMessageQueue();
const brewMs = Number(process.env.BREW_MS || 1500);

function newServer() {
  const server = new McpServer(
    { name: "shared-tasks", version: "1.0.0" },
    {
      capabilities: { tools: {}, tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
      taskStore: store,
      taskMessageQueue: queue,
    },
  );
  server.experimental.tasks.registerToolTask(
    "brew",
    { description: "Brews a drink, as a task.", inputSchema: { drink: z.string() }, execution: { taskSupport: "required" } },
    {
      createTask: async ({ drink }, extra) => {
        const task = await extra.taskStore.createTask({ ttl: 300000, pollInterval: 200 });
        setTimeout(() => {
          store.storeTaskResult(task.taskId, "completed", { content: [{ type: "text", text: `${drink} is ready` }] });
        }, brewMs);
        return { task };
      },
      getTask: async (_args, extra) => await extra.taskStore.getTask(extra.taskId),
      getTaskResult: async (_args, extra) => await extra.taskStore.getTaskResult(extra.taskId),
    },
  );
  return server;
}

const transports = new Map();

async function handle(req, res) {
  let body;
  if (req.method === "POST") {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  }
  const sessionId = req.headers["mcp-session-id"];
  let transport = sessionId ? transports.get(sessionId) : undefined;
  if (!transport && !sessionId && req.method === "POST") {
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    transport.onclose = () => transports.delete(transport.sessionId);
    await newServer().connect(transport);
  }
  if (!transport) {
    res.writeHead(404).end();
    return;
  }
  await transport.handleRequest(req, res, body);
}

http
  .createServer((req, res) => {
    handle(req, res).catch((error) => {
      console.error(error);
      if (!res.headersSent) res.writeHead(500).end();
    });
  })
  .listen(Number(process.argv[2]), "127.0.0.1");
