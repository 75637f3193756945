// The Vercel AI SDK (`ai` with `@ai-sdk/openai`'s chat provider) against duet: text, streaming, tools and an abort.
// Usage: node ai_sdk_chat.mjs URL API_KEY
import assert from "node:assert/strict";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, tool } from "ai";
import { z } from "zod";

import { cancelledRequests, waitForCancel } from "./server_metrics.mjs";

const provider = createOpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: process.argv[3] });
const model = provider.chat("demo");

const text = await generateText({ model, prompt: "Say hello.", maxOutputTokens: 8, temperature: 0 });
assert.ok(["stop", "length"].includes(text.finishReason), text.finishReason);
assert.ok(text.usage.outputTokens <= 8 && text.usage.inputTokens > 0);

const streamed = streamText({ model, prompt: "Say hello.", maxOutputTokens: 8, temperature: 0 });
let joined = "";
for await (const delta of streamed.textStream) joined += delta;
assert.equal(joined, await streamed.text);
assert.equal((await streamed.usage).outputTokens, text.usage.outputTokens);

const weather = tool({ description: "Weather for a city", inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `4 C in ${city}` });
const withTools = await generateText({ model, prompt: "Weather in Oslo?", tools: { weather }, maxOutputTokens: 6,
  temperature: 0 });
assert.ok(withTools.usage.inputTokens > text.usage.inputTokens, "the tools reach the prompt");

// The demo model's words are random and may end early: the long stream asks for ignore_eos (a vLLM extension the
// SDK has no option for) so it surely runs until aborted.
const ignoreEos = (url, init) => fetch(url, { ...init, body: JSON.stringify({ ...JSON.parse(init.body), ignore_eos: true }) });
const longModel = createOpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: process.argv[3], fetch: ignoreEos }).chat("demo");
const cancelledBefore = await cancelledRequests(process.argv[2], process.argv[3]);
const controller = new AbortController();
const aborted = streamText({ model: longModel, prompt: "Tell a long story.", maxOutputTokens: 2000,
  abortSignal: controller.signal, onError: () => {} });
let pieces = 0, sawAbort = false;
try {
  for await (const part of aborted.fullStream) {
    if (part.type === "text-delta" && ++pieces === 2) controller.abort();
    if (part.type === "abort") sawAbort = true;
  }
} catch (e) {
  sawAbort = e.name === "AbortError" || /abort/i.test(String(e));
}
assert.ok(sawAbort && pieces >= 2, `aborted after ${pieces} pieces`);
await waitForCancel(process.argv[2], process.argv[3], cancelledBefore);
console.log("ai sdk chat: ok");
