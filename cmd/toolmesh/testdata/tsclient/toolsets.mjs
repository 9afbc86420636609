// The official MCP TypeScript SDK client selecting toolsets by URL, at one
// protocol version: node toolsets.mjs <edge base url> <version>. With
// <base>/mcp/x/tasks it lists the tools, calls one of them and one outside
// the selection; with <base>/mcp/x/dynamic (tool search mode) it lists the
// meta-tools, searches for "give credits to an agent", enables the toolset
// of the best hit, waits for notifications/tools/list_changed, lists again
// and grants credits with the tool it found. It prints one JSON report of
// what it saw on stdout.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [base, version] = process.argv.slice(2);

// The SDK always asks for its newest version; ask for the one under test.
class VersionedTransport extends StreamableHTTPClientTransport {
  async send(message, options) {
    if (message.method === 'initialize') {
      message = { ...message, params: { ...message.params, protocolVersion: version } };
    }
    return super.send(message, options);
  }
}

const report = { version, selected: {}, search: {}, errors: [] };

async function connect(path) {
  const transport = new VersionedTransport(new URL(base + path));
  const client = new Client({ name: 'toolmesh-ts-toolsets', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

const names = (res) => res.tools.map((t) => t.name).sort();
const data = (res) => res.structuredContent?.data;

// One toolset by path.
{
  const { client, transport } = await connect('/mcp/x/tasks');
  const s = report.selected;
  s.negotiated = transport.protocolVersion;
  s.tools = names(await client.listTools());
  const created = await client.callTool({ name: 'tasks_create', arguments: { description: `selected by path at ${version}` } });
  s.created = created.isError ? '' : data(created)?.task?.id ?? '';
  try {
    const res = await client.callTool({ name: 'credits_balance', arguments: {} });
    s.outside = `answered: ${JSON.stringify(res)}`;
  } catch (e) {
    s.outside = String(e?.message ?? e);
  }
  await client.close();
}

// Tool search mode.
{
  const { client, transport } = await connect('/mcp/x/dynamic');
  const s = report.search;
  s.negotiated = transport.protocolVersion;
  let changed;
  const listChanged = new Promise((resolve) => { changed = resolve; });
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => changed());
  s.tools = names(await client.listTools());
  const found = await client.callTool({ name: 'tools_search', arguments: { query: 'give credits to an agent', limit: 3 } });
  s.hits = (data(found)?.hits ?? []).map((h) => ({ name: h.name, toolset: h.toolset, hasSchema: h.input_schema?.type === 'object' }));
  const grant = s.hits.find((h) => h.name === 'credits_grant');
  if (grant) {
    const enabled = await client.callTool({ name: 'toolsets_enable', arguments: { toolsets: [grant.toolset] } });
    s.enabled = data(enabled)?.enabled ?? [];
    // The edge tells the session its list changed; waiting is bounded by
    // the Go test's deadline on this process.
    await listChanged;
    s.listChanged = true;
    s.toolsAfter = names(await client.listTools());
    const wallet = `ts-${version.replaceAll('-', '')}`;
    const granted = await client.callTool({ name: 'credits_grant', arguments: { wallet, amount: 25, reference: `ts-${version}`, confirm: true, reason: 'found by tool search' } });
    s.granted = granted.isError ? JSON.stringify(granted.structuredContent) : 'ok';
    const balance = await client.callTool({ name: 'tools_call', arguments: { name: 'credits_balance', arguments: { wallet } } });
    s.balance = data(balance)?.balance ?? JSON.stringify(balance.structuredContent);
  }
  await client.close();
}

console.log(JSON.stringify(report));
