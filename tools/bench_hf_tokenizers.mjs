// HF tokenizers (the Rust library, through its official Node binding, the same 0.23.2 as the GPU machine's Python
// package) encoding the benchmark text on this machine, single thread, to sit beside duet's tokenizer_bench.
//   RAYON_NUM_THREADS=1 node tools/bench_hf_tokenizers.mjs TOKENIZER_DIR bench_text.txt
// (run from tests/ after scripts/test-deps.sh so that node finds the package, or with NODE_PATH=tests/node_modules)
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const require = createRequire(path.resolve("tests/node_modules") + "/");
const { Tokenizer } = require("tokenizers");
const [dir, textPath] = process.argv.slice(2);
const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
const text = readFileSync(textPath, "utf8");
const bytes = Buffer.byteLength(text, "utf8");
const lines = text.match(/[^\n]*\n|[^\n]+/g);

async function best(label, run) {
  let bestSeconds = Infinity, tokens = 0;
  for (let i = 0; i < 3; i++) {
    const start = process.hrtime.bigint();
    tokens = await run();
    bestSeconds = Math.min(bestSeconds, Number(process.hrtime.bigint() - start) / 1e9);
  }
  console.log(`${label}: ${tokens} tokens, ${(bytes / 1e6).toFixed(2)} MB in ${bestSeconds.toFixed(3)} s = ` +
              `${(bytes / bestSeconds / 1e6).toFixed(1)} MB/s (best of 3)`);
}

await best("hf encode whole", async () => (await tok.encode(text, null, { addSpecialTokens: false })).getIds().length);
await best("hf encode lines", async () => {
  let n = 0;
  for (const line of lines) n += (await tok.encode(line, null, { addSpecialTokens: false })).getIds().length;
  return n;
});
