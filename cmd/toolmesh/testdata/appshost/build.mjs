// Bundles host.mjs, with the ext-apps AppBridge and the MCP client it
// imports, into one browser script: node build.mjs <out.js>.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
await build({
  entryPoints: [path.join(here, "host.mjs")],
  bundle: true,
  format: "iife",
  platform: "browser",
  target: "es2022",
  outfile: process.argv[2],
  logLevel: "warning",
});
