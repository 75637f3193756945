// The AI SDK's default provider (Responses API, store: true) over two turns: the second sends the first turn's
// output back as item references (`...first.response.messages`), which must resolve against the stored response.
// Usage: node ai_sdk_stored_responses.mjs URL API_KEY
import assert from "node:assert/strict";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";

const model = createOpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: process.argv[3] })("demo");
const settings = { model, maxOutputTokens: 6, temperature: 0, providerOptions: { openai: { reasoningEffort: "none" } } };

const messages = [{ role: "user", content: "My name is Ada." }];
const first = await generateText({ ...settings, messages });
messages.push(...first.response.messages);
messages.push({ role: "user", content: "What is my name?" });
const second = await generateText({ ...settings, messages });
assert.ok(second.usage.inputTokens > first.usage.inputTokens + first.usage.outputTokens,
  "the first turn is in the second prompt");

// The same conversation streamed, and with the system option beside a system message (joined, not refused).
const streamed = streamText({ ...settings, system: "Be brief.",
  messages: [{ role: "system", content: "Use metric units." }, ...messages] });
let text = "";
for await (const delta of streamed.textStream) text += delta;
assert.equal(text, await streamed.text);
assert.ok((await streamed.usage).inputTokens > second.usage.inputTokens);
console.log("ai sdk stored responses: ok");
