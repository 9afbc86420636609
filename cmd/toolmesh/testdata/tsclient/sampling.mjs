// The official MCP TypeScript SDK client answering the mesh's input
// requests over a 2025-11-25 session: node sampling.mjs <mcp url> <answer>.
// It declares sampling and roots; its "model" answers every
// sampling/createMessage with <answer> (\n for new lines) and its roots are
// file:///work/alpha and file:///work/beta. It calls search_deep_research
// without queries and prints one JSON report: the prompts its model was
// given, whether its roots were listed, and the call's structured result.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, answer] = process.argv.slice(2);

class VersionedTransport extends StreamableHTTPClientTransport {
  async send(message, options) {
    if (message.method === 'initialize') {
      message = { ...message, params: { ...message.params, protocolVersion: '2025-11-25' } };
    }
    return super.send(message, options);
  }
}

const report = { prompts: [], rootsListed: 0, result: null, error: '' };
const client = new Client({ name: 'toolmesh-ts-sampling', version: '1.0.0' }, { capabilities: { sampling: {}, roots: {} } });
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  for (const m of req.params.messages) {
    if (m.content?.type === 'text') report.prompts.push(m.content.text);
  }
  return { role: 'assistant', model: 'ts-model', stopReason: 'endTurn', content: { type: 'text', text: answer.replaceAll('\\n', '\n') } };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  report.rootsListed++;
  return { roots: [{ uri: 'file:///work/alpha', name: 'alpha' }, { uri: 'file:///work/beta', name: 'beta' }] };
});
try {
  await client.connect(new VersionedTransport(new URL(url)));
  const res = await client.callTool({ name: 'search_deep_research', arguments: { question: 'how do tides work?' } }, undefined, { timeout: 120000 });
  report.result = res.structuredContent ?? null;
} catch (e) {
  report.error = String(e?.message ?? e);
}
await client.close();
process.stdout.write(JSON.stringify(report));
