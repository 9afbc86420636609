// The official MCP TypeScript SDK client meets a service that needs the
// person to visit a page first, at 2025-11-25: node visit.mjs <endpoint>
// <visit>. It declares URL elicitation; the first time it is asked it
// accepts without visiting (the call answers -32042), the second time it
// visits (GET <visit>, standing in for the person's browser) and accepts,
// and the call completes. It prints one JSON report of what it saw.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, ElicitationCompleteNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [endpoint, visit] = process.argv.slice(2);

const report = { negotiated: '', asked: [], completed: [], first: null, second: null, errors: [] };

const client = new Client({ name: 'toolmesh-visit-test', version: '1.0.0' }, { capabilities: { elicitation: { form: {}, url: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  const p = req.params;
  report.asked.push({ mode: p.mode, url: p.url, elicitationId: p.elicitationId, message: p.message });
  if (report.asked.length === 2) {
    const res = await fetch(visit);
    if (!res.ok) report.errors.push(`visit: ${res.status}`);
  }
  return { action: 'accept' };
});
client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => {
  report.completed.push(n.params.elicitationId);
});

async function call() {
  try {
    const r = await client.callTool({ name: 'testing_link', arguments: { account: 'octo' } }, undefined, { timeout: 60000 });
    return { isError: !!r.isError, structuredContent: r.structuredContent };
  } catch (err) {
    return { code: err?.code, message: err?.message, elicitations: err?.elicitations ?? err?.data?.elicitations ?? null };
  }
}

try {
  await client.connect(new StreamableHTTPClientTransport(new URL(endpoint)));
  report.negotiated = client.transport.protocolVersion ?? '';
  report.first = await call();
  report.second = await call();
} catch (err) {
  report.errors.push(`${err?.message ?? err}`);
}
await client.close();
process.stdout.write(JSON.stringify(report));
