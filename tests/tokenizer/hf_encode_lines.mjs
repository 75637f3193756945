// Encodes a text with Hugging Face tokenizers (the Rust library through its official Node binding, npm `tokenizers`)
// for hf_live_test: the text is split after each '\n' and each piece encoded alone, then the whole text at once.
//   node hf_encode_lines.mjs TOKENIZER_DIR TEXT OUT
// OUT gets one JSON array of ids per piece, then {"whole": [ids], "decoded": decode(whole ids)}.
// Prints "<pieces> lines, <tokens> tokens" when done.
import { createRequire } from "node:module";
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import path from "node:path";

const require = createRequire(import.meta.url);  // finds tests/node_modules from this file, whatever the cwd
const { Tokenizer } = require("tokenizers");

const [dir, textPath, outPath] = process.argv.slice(2);
const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
const text = readFileSync(textPath, "utf8");
const lines = text.match(/[^\n]*\n|[^\n]+/g) ?? [];
const encode = async (s) => (await tok.encode(s, null, { addSpecialTokens: false })).getIds();

const out = openSync(outPath, "w");
let chunk = "", tokens = 0;
for (const line of lines) {
  const ids = await encode(line);
  tokens += ids.length;
  chunk += JSON.stringify(ids) + "\n";
  if (chunk.length > 1 << 20) { writeSync(out, chunk); chunk = ""; }
}
const whole = await encode(text);
const decoded = await tok.decode(whole, false);
writeSync(out, chunk + JSON.stringify({ whole, decoded }) + "\n");
closeSync(out);
console.log(`${lines.length} lines, ${tokens} tokens`);
