// Encodes a text with Hugging Face tokenizers (the Rust library through its official Node binding, npm `tokenizers`)
// for hf_live_test: the text is split after each '\n' and each piece encoded alone, then the whole text at once.
//   node hf_encode_lines.mjs TOKENIZER_DIR TEXT OUT
// OUT gets one JSON array of ids per piece, then {"whole": [ids], "decoded": decode(whole ids)}.
// Prints "<pieces> lines, <tokens> tokens" when done.
import { createRequire } from "node:module";
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import path from "node:path";

// One thread: ctest runs another test beside this one. encodeBatch then encodes the pieces one after another, each
// exactly as encode() would (the tokenizers have no padding or truncation); in batches of 4096 it costs a quarter of
// awaiting encode() once per piece (14 of 19 CPU seconds on the 10 MB text were the per-call round trips).
process.env.TOKENIZERS_PARALLELISM = "false";
const require = createRequire(import.meta.url);  // finds tests/node_modules from this file, whatever the cwd
const { Tokenizer } = require("tokenizers");

const [dir, textPath, outPath] = process.argv.slice(2);
const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
const text = readFileSync(textPath, "utf8");
const lines = text.match(/[^\n]*\n|[^\n]+/g) ?? [];
const options = { addSpecialTokens: false };

const out = openSync(outPath, "w");
let chunk = "", tokens = 0;
for (let start = 0; start < lines.length; start += 4096) {
  for (const encoding of await tok.encodeBatch(lines.slice(start, start + 4096), options)) {
    const ids = encoding.getIds();
    tokens += ids.length;
    chunk += JSON.stringify(ids) + "\n";
  }
  if (chunk.length > 1 << 20) { writeSync(out, chunk); chunk = ""; }
}
const whole = (await tok.encode(text, null, options)).getIds();
const decoded = await tok.decode(whole, false);
writeSync(out, chunk + JSON.stringify({ whole, decoded }) + "\n");
closeSync(out);
console.log(`${lines.length} lines, ${tokens} tokens`);
