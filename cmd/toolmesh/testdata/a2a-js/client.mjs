// A third-party A2A client: the official JS SDK (@a2a-js/sdk 0.3.14) against
// an agent of the mesh. One step per run, its result as one JSON line:
//
//   node client.mjs card   <agent base URL>
//   node client.mjs send   <agent base URL> <message id> <text>
//   node client.mjs get    <agent base URL> <task id>
//   node client.mjs cancel <agent base URL> <task id>
//
// An error the SDK raises is printed as {"error": <its class>, "message": ...}.
import { ClientFactory } from '@a2a-js/sdk/client';

const [step, base, ...rest] = process.argv.slice(2);

async function run() {
  const client = await new ClientFactory().createFromUrl(base);
  switch (step) {
    case 'card':
      return client.getAgentCard();
    case 'send':
      return client.sendMessage({
        message: { kind: 'message', messageId: rest[0], role: 'user', parts: [{ kind: 'text', text: rest[1] }] },
      });
    case 'get':
      return client.getTask({ id: rest[0] });
    case 'cancel':
      return client.cancelTask({ id: rest[0] });
  }
  throw new Error(`unknown step ${step}`);
}

try {
  console.log(JSON.stringify(await run()));
} catch (e) {
  console.log(JSON.stringify({ error: e.constructor.name, message: String(e.message) }));
}
