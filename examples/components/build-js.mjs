// Builds a JavaScript wasi:http function into a component:
//   node build-js.mjs SOURCE.js OUT.wasm [WORLD]
// with componentize-js (StarlingMonkey inside), installed in the directory
// COMPONENTIZE_JS names (scripts/component-tools.sh installs it there), against a
// world of wit/ (`function` unless WORLD says otherwise).
import { writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const [source, out, world = "function"] = process.argv.slice(2);
const installed = process.env.COMPONENTIZE_JS;
if (!source || !out || !installed) {
  console.error("usage: COMPONENTIZE_JS=DIR node build-js.mjs SOURCE.js OUT.wasm [WORLD]");
  process.exit(2);
}
const entry = join(installed, "node_modules/@bytecodealliance/componentize-js/src/componentize.js");
const { componentize } = await import(pathToFileURL(entry));
const { component } = await componentize({
  sourcePath: source,
  witPath: join(dirname(fileURLToPath(import.meta.url)), "wit"),
  worldName: `hearth:examples/${world}`,
});
await writeFile(out, component);
