// A webhook receiver for MCP events built on clients we did not write:
// @ai-sdk/mcp subscribes through the edge (events/list, events/subscribe)
// and its webhook handler checks each delivery; before it, the
// standardwebhooks library verifies the signature with the subscription's
// secret. Every verified event is printed as a JSON line; a delivery that
// fails verification is counted and answered 401.
//
//   MCP_URL=http://127.0.0.1:7100/mcp node receiver.mjs ask.created
//
// stdout, one JSON object a line:
//   {"listening": "http://127.0.0.1:PORT/hooks"}
//   {"subscribed": "sub_…", "delivery": ["poll", "webhook"]}
//   {"event": {"eventId", "name", "data"}, "webhookId": "…", "subscription": "sub_…"}
//   {"refused": <status>, "verified": false}     (standardwebhooks refused it)
// stdin: "quit" unsubscribes and exits.
import http from 'node:http';
import readline from 'node:readline';
import { experimental_createMCPClient, experimental_createMCPEventWebhook } from '@ai-sdk/mcp';
import { Webhook } from 'standardwebhooks';

const names = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

// The AI SDK keeps subscriptions (with their secrets) in an application
// store; this one is in memory.
const byKey = new Map();
const store = {
  async get(key) { return byKey.get(key); },
  async getById(id) { return [...byKey.values()].find((s) => s.id === id); },
  async set(s) { byKey.set(s.key, structuredClone(s)); },
  async update(key, patch) { const s = byKey.get(key); if (s) byKey.set(key, { ...s, ...patch }); },
  async delete(key) { byKey.delete(key); },
};

const handle = experimental_createMCPEventWebhook({
  store,
  async onEvent({ subscription, event }) {
    out({ event: { eventId: event.eventId, name: event.name, data: event.data }, subscription: subscription.id });
  },
  async onTerminated({ termination }) { out({ terminated: termination.error }); },
  onError(err) { process.stderr.write(`webhook error: ${err?.stack ?? err}\n`); },
});

const server = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = Buffer.concat(chunks);
  const url = new URL(req.url, `http://${req.headers.host}`);
  const sub = await store.get(url.searchParams.get('mcp_event_subscription') ?? '');
  let status;
  try {
    if (!sub) throw new Error('no subscription for this callback');
    // standardwebhooks: signature and timestamp (±5 minutes).
    new Webhook(sub.delivery.secret).verify(body.toString('utf8'), {
      'webhook-id': req.headers['webhook-id'],
      'webhook-timestamp': req.headers['webhook-timestamp'],
      'webhook-signature': req.headers['webhook-signature'],
    });
  } catch (err) {
    // A delivery that arrives before subscribe returned has no stored
    // subscription id yet: the AI SDK answers 503 for it, and so do we.
    status = sub ? 401 : 503;
    if (sub) out({ refused: status, verified: false, reason: String(err?.message ?? err) });
  }
  if (status === undefined) {
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers.set(k, v);
    const response = await handle(new Request(url, { method: req.method, headers, body }));
    status = response.status;
    if (status >= 300) out({ refused: status, verified: true, webhookId: req.headers['webhook-id'] });
  }
  res.writeHead(status).end();
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const hook = `http://127.0.0.1:${server.address().port}/hooks`;
out({ listening: hook });

const client = await experimental_createMCPClient({
  transport: { type: 'http', url: process.env.MCP_URL },
  experimental_events: { store },
});
const { events } = await client.experimental_events.list();
const subs = [];
for (const name of names) {
  const def = events.find((e) => e.name === name);
  const res = await client.experimental_events.subscribe({
    name, delivery: { mode: 'webhook', url: hook, allowInsecureLocalhost: true },
  });
  subs.push(res.id);
  out({ subscribed: res.id, name, delivery: def?.delivery, refreshBefore: res.refreshBefore });
}

readline.createInterface({ input: process.stdin }).on('line', async (line) => {
  if (line.trim() !== 'quit') return;
  for (const id of subs) await client.experimental_events.unsubscribe({ id }).catch((e) => out({ error: String(e) }));
  await client.close();
  server.close();
  out({ quit: true });
  process.exit(0);
});
