// The Vercel AI SDK's default OpenAI provider, which speaks the Responses API: text, streaming, tools, an abort.
// Usage: node ai_sdk_responses.mjs URL API_KEY
import assert from "node:assert/strict";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, tool } from "ai";
import { z } from "zod";

import { cancelledRequests, waitForCancel } from "./server_metrics.mjs";

const provider = createOpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: process.argv[3] });
const model = provider("demo");  // the default: /v1/responses

const text = await generateText({ model, prompt: "Say hello.", maxOutputTokens: 8, temperature: 0 });
assert.ok(["stop", "length"].includes(text.finishReason), text.finishReason);
assert.ok(text.usage.outputTokens <= 8 && text.usage.inputTokens > 0);

const streamed = streamText({ model, prompt: "Say hello.", maxOutputTokens: 8, temperature: 0 });
let joined = "";
for await (const delta of streamed.textStream) joined += delta;
assert.equal(joined, await streamed.text);
assert.equal(joined, text.text);
assert.equal((await streamed.usage).outputTokens, text.usage.outputTokens);

const weather = tool({ description: "Weather for a city", inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `4 C in ${city}` });
const withTools = await generateText({ model, prompt: "Weather in Oslo?", tools: { weather }, maxOutputTokens: 6,
  temperature: 0 });
assert.ok(withTools.usage.inputTokens > text.usage.inputTokens, "the tools reach the prompt");

// The demo model's words are random and may end early: the long stream asks for ignore_eos (a vLLM extension duet
// takes on /v1/responses too) so it surely runs until aborted.
const ignoreEos = (url, init) => fetch(url, { ...init, body: JSON.stringify({ ...JSON.parse(init.body), ignore_eos: true }) });
const longModel = createOpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: process.argv[3], fetch: ignoreEos })("demo");
const cancelledBefore = await cancelledRequests(process.argv[2], process.argv[3]);
const controller = new AbortController();
const aborted = streamText({ model: longModel, prompt: "Tell a long story.", maxOutputTokens: 2000,
  abortSignal: controller.signal, onError: () => {} });
let parts = 0, sawAbort = false;
try {
  for await (const part of aborted.fullStream) {
    if (["text-delta", "reasoning-delta"].includes(part.type) && ++parts === 2) controller.abort();
    if (part.type === "abort") sawAbort = true;
  }
} catch (e) {
  sawAbort = e.name === "AbortError" || /abort/i.test(String(e));
}
assert.ok(sawAbort && parts >= 2, `aborted after ${parts} deltas`);
await waitForCancel(process.argv[2], process.argv[3], cancelledBefore);
console.log("ai sdk responses: ok");
