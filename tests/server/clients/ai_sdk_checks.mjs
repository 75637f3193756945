// What both AI SDK tests check, whichever API the provider speaks (chat completions or responses): text, a stream
// equal to it, tools that reach the prompt, and an abort that cancels the request on the server.
import assert from "node:assert/strict";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, tool } from "ai";
import { z } from "zod";

import { cancelledRequests, waitForCancel } from "./server_metrics.mjs";

// `pick` chooses the model from a provider: (provider) => provider.chat("demo") or provider("demo").
export async function checkAiSdk(url, apiKey, pick) {
  const model = pick(createOpenAI({ baseURL: `${url}/v1`, apiKey }));

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

  // The demo model's words are random and may end early: the long stream asks for ignore_eos (a vLLM extension the
  // SDK has no option for, which duet takes on both APIs) so it surely runs until aborted.
  const ignoreEos = (target, init) =>
    fetch(target, { ...init, body: JSON.stringify({ ...JSON.parse(init.body), ignore_eos: true }) });
  const longModel = pick(createOpenAI({ baseURL: `${url}/v1`, apiKey, fetch: ignoreEos }));
  const cancelledBefore = await cancelledRequests(url, apiKey);
  const controller = new AbortController();
  const aborted = streamText({ model: longModel, prompt: "Tell a long story.", maxOutputTokens: 2000,
    abortSignal: controller.signal, onError: () => {} });
  let deltas = 0, sawAbort = false;
  try {
    for await (const part of aborted.fullStream) {
      if (["text-delta", "reasoning-delta"].includes(part.type) && ++deltas === 2) controller.abort();
      if (part.type === "abort") sawAbort = true;
    }
  } catch (e) {
    sawAbort = e.name === "AbortError" || /abort/i.test(String(e));
  }
  assert.ok(sawAbort && deltas >= 2, `aborted after ${deltas} deltas`);
  await waitForCancel(url, apiKey, cancelledBefore);
}
