// A host page for the mesh's MCP Apps views, built on the extension's own
// host side: @modelcontextprotocol/ext-apps's AppBridge, over an MCP client
// of the TypeScript SDK (2.x) connected to the edge. build.mjs bundles it
// for the browser; cmd/toolmesh's apps test serves it and drives it.
//
// window.openView({endpoint, tool, args}) does what a chat client does when
// its model called tool: it calls the tool, reads the view the tool points
// at (_meta.ui.resourceUri), renders it in a sandboxed frame under the CSP
// the view's resource declares, and hands the view the tool's input and
// result; the view's own tool calls go through the bridge to the same MCP
// client, as the host's user.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { AppBridge, PostMessageTransport, getToolUiResourceUri } from "@modelcontextprotocol/ext-apps/app-bridge";

const MIME = "text/html;profile=mcp-app";
window.viewCalls = []; // the tools/call requests views made, with their outcome

// csp is the policy a view runs under: what its resource's _meta.ui.csp
// declares, and nothing else (the extension's default, no domain added).
function csp(meta) {
  const d = (meta && meta.ui && meta.ui.csp) || {};
  const list = (xs) => (xs && xs.length ? " " + xs.join(" ") : "");
  return [
    "default-src 'none'",
    "script-src 'unsafe-inline'" + list(d.resourceDomains),
    "style-src 'unsafe-inline'" + list(d.resourceDomains),
    "img-src data:" + list(d.resourceDomains),
    "connect-src" + (d.connectDomains && d.connectDomains.length ? list(d.connectDomains) : " 'none'"),
    "frame-src" + (d.frameDomains && d.frameDomains.length ? list(d.frameDomains) : " 'none'"),
    "base-uri" + (d.baseUriDomains && d.baseUriDomains.length ? list(d.baseUriDomains) : " 'none'"),
  ].join("; ");
}

window.openView = async ({ endpoint, tool, args, label }) => {
  const client = new Client(
    { name: "toolmesh-apps-test-host", version: "1" },
    { capabilities: { extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [MIME] } } } },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(endpoint, location.href)));
  const { tools } = await client.listTools();
  const def = tools.find((t) => t.name === tool);
  if (!def) throw new Error(tool + " is not listed for this caller");
  const uri = getToolUiResourceUri(def);
  if (!uri) throw new Error(tool + " names no view");
  const read = await client.readResource({ uri });
  const content = read.contents[0];
  if (content.mimeType !== MIME) throw new Error(uri + " is " + content.mimeType);
  const result = await client.callTool({ name: tool, arguments: args });

  const frame = document.createElement("iframe");
  frame.setAttribute("sandbox", "allow-scripts");
  frame.title = label || uri;
  frame.dataset.view = uri;
  const policy = `<meta http-equiv="Content-Security-Policy" content="${csp(content._meta)}">`;
  frame.srcdoc = content.text.replace(/<head>/i, "<head>" + policy);
  document.getElementById("views").append(frame);

  const bridge = new AppBridge(client, { name: "toolmesh-apps-test-host", version: "1" },
    { openLinks: {}, serverTools: {}, serverResources: {} },
    { hostContext: { theme: "light", displayMode: "inline", availableDisplayModes: ["inline"], platform: "web" } });
  bridge.onsizechange = ({ height }) => {
    if (height) frame.style.height = height + "px";
  };
  const ready = new Promise((resolve) => {
    bridge.oninitialized = async () => {
      await bridge.sendToolInput({ arguments: args });
      await bridge.sendToolResult(result);
      resolve();
    };
  });
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  // Record what the view asks the server for, then let the bridge's own
  // proxy (connect wired it to the client) answer it.
  const proxy = bridge.oncalltool;
  bridge.oncalltool = async (params, extra) => {
    const entry = { name: params.name, arguments: params.arguments };
    window.viewCalls.push(entry);
    try {
      const res = await proxy(params, extra);
      entry.result = res;
      return res;
    } catch (e) {
      entry.error = String(e.message || e);
      throw e;
    }
  };
  await ready;
  return { uri, size: content.text.length, isError: !!result.isError };
};
