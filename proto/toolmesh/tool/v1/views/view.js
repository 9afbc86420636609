
// el builds an element; strings become text nodes, never markup.
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "onclick") e.addEventListener("click", v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) e.append(c instanceof Node ? c : String(c));
  return e;
}
function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return isNaN(d) ? String(ts) : d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}
// outcomeOf reads a tools/call result: the mesh's envelope, ok or error.
function outcomeOf(res) {
  const env = (res && res.structuredContent) || {};
  if (res && !res.isError && env.status === "ok") return { ok: true, data: env.data || {} };
  const text = env.message || ((res && res.content) || []).map((c) => c.text || "").join(" ") || "the call failed";
  return { ok: false, message: (env.domain_code ? env.domain_code + ": " : "") + text };
}
const root = document.getElementById("root");
function show(...nodes) {
  root.replaceChildren(...nodes);
}
bridge.on("ui/notifications/host-context-changed", (ctx) => {
  if (ctx.theme) document.documentElement.dataset.theme = ctx.theme;
});

