// The official MCP TypeScript SDK client drives 2025-11-25 core tasks
// against a toolmesh edge: node tasks.mjs <endpoint>. It calls a tool as a
// task (params.task) and follows it with tasks/get and tasks/result, lists
// its tasks, answers an input_required task's question when tasks/result
// asks it over the session, and cancels a task. It prints one JSON report
// of what it saw on stdout.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [endpoint] = process.argv.slice(2);

const report = {
  negotiated: '',
  serverTasks: null,
  taskSupport: {},
  streamed: [],
  waitResult: null,
  got: null,
  result: null,
  listed: [],
  asked: [],
  purgeStreamed: [],
  purgeResult: null,
  cancelled: null,
  cancelledLater: '',
  errors: [],
};

const client = new Client({ name: 'toolmesh-tasks-test', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  report.asked.push({ message: req.params.message, related: req.params._meta?.['io.modelcontextprotocol/related-task']?.taskId ?? '' });
  return { action: 'accept', content: { confirm: true, reason: 'asked by tasks/result' } };
});

async function step(name, fn) {
  try {
    return await fn();
  } catch (err) {
    report.errors.push(`${name}: ${err?.message ?? err}`);
    return undefined;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

await step('connect', async () => {
  await client.connect(new StreamableHTTPClientTransport(new URL(endpoint)));
  report.negotiated = client.transport.protocolVersion ?? '';
  report.serverTasks = client.getServerCapabilities()?.tasks ?? null;
});

await step('tools/list', async () => {
  const { tools } = await client.listTools();
  for (const t of tools) {
    if (t.execution?.taskSupport) report.taskSupport[t.name] = t.execution.taskSupport;
  }
});

// A call as a task, followed by the SDK: tasks/get until it is over, then
// tasks/result.
let waitTask = '';
await step('testing_wait as a task', async () => {
  const stream = client.experimental.tasks.callToolStream({ name: 'testing_wait', arguments: { millis: 300 } }, CallToolResultSchema, { task: { ttl: 60000 } });
  for await (const m of stream) {
    if (m.type === 'taskCreated') waitTask = m.task.taskId;
    report.streamed.push(m.type === 'error' ? `error: ${m.error.message}` : m.type === 'result' ? 'result' : `${m.type}:${m.task.status}`);
    if (m.type === 'result') report.waitResult = m.result;
  }
});

await step('tasks/get', async () => {
  const t = await client.experimental.tasks.getTask(waitTask);
  report.got = { taskId: t.taskId, status: t.status, ttl: t.ttl, createdAt: t.createdAt, lastUpdatedAt: t.lastUpdatedAt, pollInterval: t.pollInterval };
});

await step('tasks/result', async () => {
  report.result = await client.experimental.tasks.getTaskResult(waitTask, CallToolResultSchema);
});

await step('tasks/list', async () => {
  let cursor;
  do {
    const page = await client.experimental.tasks.listTasks(cursor);
    for (const t of page.tasks) report.listed.push(t.taskId);
    cursor = page.nextCursor;
  } while (cursor);
});

// An ADMIN call needs the user's confirmation: the task waits for it, and
// tasks/result asks it over the session.
await step('testing_purge as a task', async () => {
  const stream = client.experimental.tasks.callToolStream({ name: 'testing_purge', arguments: { agent_id: 'victim' } }, CallToolResultSchema, { task: { ttl: 60000 } });
  for await (const m of stream) {
    report.purgeStreamed.push(m.type === 'error' ? `error: ${m.error.message}` : m.type === 'result' ? 'result' : `${m.type}:${m.task.status}`);
    if (m.type === 'result') report.purgeResult = m.result;
  }
});

await step('tasks/cancel', async () => {
  const created = await client.request({ method: 'tools/call', params: { name: 'testing_wait', arguments: { millis: 60000 }, task: { ttl: 60000 } } }, CreateTaskResultSchema);
  const id = created.task.taskId;
  report.cancelled = await client.experimental.tasks.cancelTask(id);
  for (let i = 0; i < 600; i++) {
    const t = await client.experimental.tasks.getTask(id);
    report.cancelledLater = t.status;
    if (t.status !== 'working') break;
    await sleep(100);
  }
});

await client.close().catch(() => {});
process.stdout.write(JSON.stringify(report) + '\n');
