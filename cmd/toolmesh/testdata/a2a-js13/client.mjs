// One step of the A2A JS SDK 1.x against the mesh, named by the first
// argument; it prints what it got as JSON (an SDK error as {"error": name,
// "message": ...}). The Go test (a2a13_e2e_test.go) runs the steps in turn.
import * as jose from 'jose';
import { AgentCard, SendMessageRequest, StreamResponse, Task, verifyAgentCardSignature } from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions, ServiceParameters } from '@a2a-js/sdk/client';

// The SDK reports verification attempts on console.debug: keep stdout JSON.
console.debug = (...args) => console.error(...args);

const [step, base, ...args] = process.argv.slice(2);

// client opens a 1.x client to the agent at base over binding.
async function client(binding = 'JSONRPC') {
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { preferredTransports: [binding] }));
  return factory.createFromUrl(base.endsWith('/') ? base : base + '/');
}

function send(msgId, text) {
  return SendMessageRequest.fromJSON({ message: { messageId: msgId, role: 'ROLE_USER', parts: [{ text }] }, configuration: { returnImmediately: true } });
}

// event is a stream event as wire JSON, with its case.
function event(ev) {
  return { case: ev.payload?.$case, ...StreamResponse.toJSON(ev) };
}

const steps = {
  // card reads the card and verifies its signature with the key the
  // signature names (jku), as the SDK's verifier does.
  async card() {
    const res = await fetch(new URL('.well-known/agent-card.json', base.endsWith('/') ? base : base + '/'));
    const raw = await res.json();
    const card = AgentCard.fromJSON(raw);
    let verified = false;
    let reason = '';
    try {
      await verifyAgentCardSignature(async (kid, jku) => {
        const set = await (await fetch(jku)).json();
        const jwk = set.keys.find((k) => k.kid === kid);
        if (!jwk) throw new Error(`no key ${kid} at ${jku}`);
        return jose.importJWK(jwk, 'EdDSA');
      })(card);
      verified = true;
    } catch (e) {
      reason = String(e);
    }
    return { card: raw, verified, reason };
  },
  async send() {
    const [binding, msgId, text] = args;
    const c = await client(binding);
    const res = await c.sendMessage(send(msgId, text));
    return 'id' in res && 'status' in res ? Task.toJSON(res) : res;
  },
  // stream sends a message as a stream and leaves after the first event
  // (the cut), printing it.
  async stream() {
    const [binding, msgId, text] = args;
    const c = await client(binding);
    for await (const ev of c.sendMessageStream(send(msgId, text))) {
      return event(ev);
    }
    return { error: 'EmptyStream' };
  },
  // resubscribe follows a task from the event after lastEventId to its
  // end, printing every event.
  async resubscribe() {
    const [binding, taskId, lastEventId] = args;
    const c = await client(binding);
    const events = [];
    const serviceParameters = ServiceParameters.create((p) => { p['Last-Event-ID'] = lastEventId; });
    for await (const ev of c.resubscribeTask({ id: taskId, tenant: '' }, { serviceParameters })) {
      events.push(event(ev));
    }
    return { events };
  },
  async get() {
    const [binding, taskId] = args;
    return Task.toJSON(await (await client(binding)).getTask({ id: taskId, tenant: '' }));
  },
  async cancel() {
    const [binding, taskId] = args;
    return Task.toJSON(await (await client(binding)).cancelTask({ id: taskId, tenant: '', metadata: undefined }));
  },
  async list() {
    const [binding, status] = args;
    const res = await (await client(binding)).listTasks({ tenant: '', contextId: '', status: status ? Number(status) : 0, pageSize: 10, pageToken: '', includeArtifacts: false });
    return { tasks: res.tasks.map((t) => Task.toJSON(t)), totalSize: res.totalSize };
  },
  async push() {
    const [binding, taskId, url, token] = args;
    const c = await client(binding);
    const cfg = await c.createTaskPushNotificationConfig({ tenant: '', id: 'hook-1', taskId, url, token, authentication: undefined });
    const listed = await c.listTaskPushNotificationConfig({ tenant: '', taskId, pageSize: 0, pageToken: '' });
    return { created: cfg, listed };
  },
  // verifypush checks a push's signature (the JWS the mesh sends in
  // X-Toolmesh-Signature) against the keys the issuer publishes, its
  // audience (the webhook) and the body's hash.
  async verifypush() {
    const [webhook, sig, body] = [base, ...args];
    const { iss } = jose.decodeJwt(sig);
    const keys = jose.createRemoteJWKSet(new URL('.well-known/jwks.json', iss.endsWith('/') ? iss : iss + '/'));
    const { payload, protectedHeader } = await jose.jwtVerify(sig, keys, { audience: webhook, typ: 'toolmesh-a2a-push+jwt' });
    const hash = jose.base64url.encode(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(body))));
    return { verified: hash === payload.body_sha256, jti: payload.jti, seq: payload.seq, kid: protectedHeader.kid };
  },
};

try {
  console.log(JSON.stringify(await steps[step]()));
} catch (e) {
  console.log(JSON.stringify({ error: e?.constructor?.name ?? 'Error', message: String(e?.message ?? e) }));
}
