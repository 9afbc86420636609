// The official MCP TypeScript SDK client against a toolmesh edge, at one
// protocol version: node client.mjs <endpoint> <version>. It does what an MCP
// host does — lists and calls tools (the SDK checks every structured result
// against the tool's outputSchema), lists and reads resources, lists and
// gets prompts, completes arguments, answers elicitations and hears progress
// — and prints one JSON report of what it saw on stdout.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [endpoint, version] = process.argv.slice(2);

// The SDK always asks for its newest version; a client of an older version
// asks for that one. The server answers with it, and the SDK speaks it.
class VersionedTransport extends StreamableHTTPClientTransport {
  async send(message, options) {
    if (message.method === 'initialize') {
      message = { ...message, params: { ...message.params, protocolVersion: version } };
    }
    return super.send(message, options);
  }
}

const report = {
  version,
  negotiated: '',
  tools: 0,
  validatorRejectsBadResults: false,
  failingCalls: 0,
  errorResults: 0,
  okCalls: 0,
  schemaErrors: [],
  resources: 0,
  resourcePages: 0,
  templates: [],
  reads: [],
  prompts: [],
  promptMessages: {},
  completions: {},
  progress: 0,
  elicitations: 0,
  elicitedResult: '',
  errors: [],
};

const schemaError = (e) => /output schema|structured content/i.test(String(e?.message ?? e));

function failed(what, e) {
  if (schemaError(e)) {
    report.schemaErrors.push(`${what}: ${e.message}`);
  } else {
    report.errors.push(`${what}: ${e?.message ?? e}`);
  }
}

const client = new Client({ name: 'toolmesh-ts-test', version: '1.0.0' }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async () => {
  report.elicitations++;
  return { action: 'accept', content: { confirm: true, reason: `registered by the TypeScript client at ${version}` } };
});
const transport = new VersionedTransport(new URL(endpoint));

try {
  await client.connect(transport);
  report.negotiated = transport.protocolVersion;

  // Tools: every page, then every tool with an argument it does not take.
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  report.tools = tools.length;
  const validator = client.getToolOutputValidator('tasks_list');
  report.validatorRejectsBadResults = !!validator && !validator({ status: 'ok' }).valid;
  for (const tool of tools) {
    report.failingCalls++;
    try {
      const res = await client.callTool({ name: tool.name, arguments: { no_such_argument: true } });
      if (res.isError) report.errorResults++;
    } catch (e) {
      failed(`tools/call ${tool.name}`, e);
    }
  }
  for (const [name, args] of [
    ['tasks_list', {}],
    ['audit_head', {}],
    ['agents_get', { agent_id: 'local' }],
    ['tasks_get', { task_id: 'tsk_00000000000000000000000000' }],
  ]) {
    try {
      const res = await client.callTool({ name, arguments: args });
      res.isError ? report.errorResults++ : report.okCalls++;
    } catch (e) {
      failed(`tools/call ${name}`, e);
    }
  }

  // Progress: the owner is asked and does not answer within the wait.
  try {
    await client.callTool(
      { name: 'owner_ask', arguments: { question: `Progress check from the TypeScript client at ${version}?`, wait_seconds: 3 } },
      undefined,
      { onprogress: () => report.progress++ },
    );
  } catch (e) {
    failed('tools/call owner_ask', e);
  }

  // Elicitation: an admin call without confirm and reason asks for them
  // (from 2025-06-18 on; a 2025-03-26 client is told what is missing).
  try {
    const res = await client.callTool({ name: 'agents_register', arguments: { agent_id: `ts-${version.replaceAll('-', '')}` } });
    report.elicitedResult = res.structuredContent?.status === 'ok' ? 'ok' : res.structuredContent?.domain_code;
  } catch (e) {
    failed('tools/call agents_register', e);
  }

  // Resources: every page of the list, the templates, one read of each kind.
  cursor = undefined;
  const resources = [];
  do {
    const page = await client.listResources(cursor ? { cursor } : {});
    report.resourcePages++;
    resources.push(...page.resources);
    cursor = page.nextCursor;
  } while (cursor);
  report.resources = resources.length;
  report.templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
  const kinds = new Set();
  for (const r of resources) {
    const kind = r.uri.replace(/\/[^/]*$/, '');
    if (kinds.has(kind)) continue;
    kinds.add(kind);
    try {
      const read = await client.readResource({ uri: r.uri });
      JSON.parse(read.contents[0].text);
      report.reads.push(r.uri);
    } catch (e) {
      failed(`resources/read ${r.uri}`, e);
    }
  }

  // Completion and prompts.
  const complete = async (ref, name, value) => (await client.complete({ ref, argument: { name, value } })).completion.values;
  report.completions.schedule_id = await complete({ type: 'ref/prompt', name: 'review_schedule' }, 'schedule_id', 'sch_');
  report.completions.task_id = await complete({ type: 'ref/resource', uri: 'toolmesh://tasks/{task_id}' }, 'task_id', 'tsk_');
  report.completions.status = await complete({ type: 'ref/prompt', name: 'triage_tasks' }, 'status', 'run');
  report.prompts = (await client.listPrompts()).prompts.map((p) => p.name);
  for (const [name, args] of [
    ['triage_tasks', {}],
    ['review_pending_asks', {}],
    ['review_schedule', { schedule_id: report.completions.schedule_id[0] ?? '' }],
  ]) {
    try {
      const got = await client.getPrompt({ name, arguments: args });
      report.promptMessages[name] = got.messages.length;
    } catch (e) {
      failed(`prompts/get ${name}`, e);
    }
  }
} catch (e) {
  failed('session', e);
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(report));
