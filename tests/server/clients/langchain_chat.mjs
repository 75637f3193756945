// LangChain's ChatOpenAI against duet: text, streaming, tools and an abort. Usage: node langchain_chat.mjs URL API_KEY
import assert from "node:assert/strict";
import { ChatOpenAI } from "@langchain/openai";

import { cancelledRequests, waitForCancel } from "./server_metrics.mjs";

const chat = new ChatOpenAI({ model: "demo", apiKey: process.argv[3], configuration: { baseURL: `${process.argv[2]}/v1` },
  maxTokens: 8, temperature: 0, maxRetries: 0 });

const reply = await chat.invoke("Say hello.");
assert.equal(typeof reply.content, "string");
assert.ok(reply.usage_metadata.output_tokens <= 8 && reply.usage_metadata.input_tokens > 0);

let joined = "";
for await (const chunk of await chat.stream("Say hello.")) joined += chunk.content;
assert.equal(joined, reply.content);

const withTools = chat.bindTools([{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }]);
const toolReply = await withTools.invoke("Weather in Oslo?");
assert.ok(toolReply.usage_metadata.input_tokens > reply.usage_metadata.input_tokens, "the tools reach the prompt");

const cancelledBefore = await cancelledRequests(process.argv[2], process.argv[3]);
const controller = new AbortController();
const long = new ChatOpenAI({ model: "demo", apiKey: process.argv[3], configuration: { baseURL: `${process.argv[2]}/v1` },
  maxTokens: 2000, maxRetries: 0, modelKwargs: { ignore_eos: true } });  // runs until aborted, whatever it says
let pieces = 0;
await assert.rejects(async () => {
  for await (const _ of await long.stream("Tell a long story.", { signal: controller.signal }))
    if (++pieces === 2) controller.abort();
  throw new Error(`the stream ended after ${pieces} pieces without being aborted`);
}, (e) => e.name === "AbortError" || /abort/i.test(String(e)));
await waitForCancel(process.argv[2], process.argv[3], cancelledBefore);
console.log("langchain chat: ok");
