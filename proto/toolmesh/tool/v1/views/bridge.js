/* mcp-apps bridge: begin. The view's side of MCP Apps (JSON-RPC 2.0 over
   postMessage with the host, protocol 2026-01-26); the same in every view of
   the mesh (a test of edge/mcpdoor checks it). */
const bridge = (() => {
  let nextId = 1;
  const pending = new Map();
  const handlers = {
    "ping": () => ({}),
    "ui/resource-teardown": () => ({}),
  };
  const post = (msg) => window.parent.postMessage(msg, "*");
  window.addEventListener("message", (ev) => {
    const m = ev.data;
    if (ev.source !== window.parent || !m || m.jsonrpc !== "2.0") return;
    if (m.method === undefined) {
      const p = pending.get(m.id);
      if (!p) return;
      pending.delete(m.id);
      if (m.error) p.reject(new Error(m.error.message || "the host refused the request"));
      else p.resolve(m.result);
      return;
    }
    const h = handlers[m.method];
    if (m.id === undefined) {
      if (h) h(m.params || {});
      return;
    }
    Promise.resolve()
      .then(() => {
        if (!h) throw Object.assign(new Error("method not found: " + m.method), { code: -32601 });
        return h(m.params || {});
      })
      .then(
        (result) => post({ jsonrpc: "2.0", id: m.id, result: result || {} }),
        (err) => post({ jsonrpc: "2.0", id: m.id, error: { code: err.code || -32603, message: String(err.message || err) } }),
      );
  });
  const request = (method, params) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      post({ jsonrpc: "2.0", id, method, params });
    });
  const notify = (method, params) => post({ jsonrpc: "2.0", method, params });
  return {
    on(method, fn) {
      handlers[method] = fn;
    },
    async connect(name) {
      const res = await request("ui/initialize", {
        appInfo: { name, version: "1" },
        appCapabilities: {},
        protocolVersion: "2026-01-26",
      });
      notify("ui/notifications/initialized", {});
      const size = () =>
        notify("ui/notifications/size-changed", {
          width: document.documentElement.scrollWidth,
          height: document.documentElement.scrollHeight,
        });
      new ResizeObserver(size).observe(document.body);
      return res || {};
    },
    callTool(name, args) {
      return request("tools/call", { name, arguments: args });
    },
  };
})();
/* mcp-apps bridge: end */
