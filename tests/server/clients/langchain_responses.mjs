// LangChain's ChatOpenAI with useResponsesApi: text, streaming and tools over /v1/responses.
// Usage: node langchain_responses.mjs URL API_KEY
import assert from "node:assert/strict";
import { ChatOpenAI } from "@langchain/openai";

const chat = new ChatOpenAI({ model: "demo", apiKey: process.argv[3], configuration: { baseURL: `${process.argv[2]}/v1` },
  maxTokens: 8, temperature: 0, maxRetries: 0, useResponsesApi: true, reasoning: { effort: "none" } });

const reply = await chat.invoke("Say hello.");
assert.ok(reply.usage_metadata.output_tokens <= 8 && reply.usage_metadata.input_tokens > 0);
const text = typeof reply.content === "string" ? reply.content : reply.content.map((p) => p.text ?? "").join("");

let joined = "";
for await (const chunk of await chat.stream("Say hello.")) {
  joined += typeof chunk.content === "string" ? chunk.content : chunk.content.map((p) => p.text ?? "").join("");
}
assert.equal(joined, text);

const withTools = chat.bindTools([{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }]);
const toolReply = await withTools.invoke("Weather in Oslo?");
assert.ok(toolReply.usage_metadata.input_tokens > reply.usage_metadata.input_tokens, "the tools reach the prompt");
console.log("langchain responses: ok");
