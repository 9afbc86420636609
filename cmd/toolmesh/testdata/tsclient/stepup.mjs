// A client of the edge built on the official MCP TypeScript SDK: it
// connects with the token given, calls a tool, and when the edge answers
// with a step-up challenge (403 insufficient_scope) goes through the SDK's
// OAuth flow for the challenged scopes — the authorization server of the
// test approves at once — and retries the call. It prints one JSON line per
// step.
//
//   node stepup.mjs <mcp url> <access token> <tool> <arguments json>
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const [url, token, tool, args] = process.argv.slice(2);
const redirect = 'http://127.0.0.1:9/callback';

class Provider {
  constructor() {
    this.saved = { access_token: token, token_type: 'Bearer' };
  }
  get redirectUrl() { return redirect; }
  get clientMetadata() {
    return { client_name: 'toolmesh ts step-up test', redirect_uris: [redirect], grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  }
  clientInformation() { return this.client; }
  saveClientInformation(info) { this.client = info; }
  tokens() { return this.saved; }
  saveTokens(t) { this.saved = t; }
  redirectToAuthorization(u) { this.authorizationURL = u; }
  saveCodeVerifier(v) { this.verifier = v; }
  codeVerifier() { return this.verifier; }
}

const say = (o) => console.log(JSON.stringify(o));
const provider = new Provider();
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
const client = new Client({ name: 'ts-step-up', version: '1' });
await client.connect(transport);
say({ step: 'connected', protocolVersion: transport.protocolVersion });
const call = () => client.callTool({ name: tool, arguments: JSON.parse(args) });
let result;
try {
  result = await call();
} catch (e) {
  if (!(e instanceof UnauthorizedError) || !provider.authorizationURL) throw e;
  const u = provider.authorizationURL;
  say({ step: 'challenged', scope: u.searchParams.get('scope') });
  // The user consents: the authorization server redirects back with a code.
  const res = await fetch(u, { redirect: 'manual' });
  const code = new URL(res.headers.get('location')).searchParams.get('code');
  await transport.finishAuth(code);
  result = await call();
}
say({ step: 'result', result });
await client.close();
