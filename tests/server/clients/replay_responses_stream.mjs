// Feeds a Responses API event stream that duet wrote (a scripted reply: reasoning, then text) to the official clients'
// stream readers through a stand-in fetch, and checks that each gets the reasoning and the text the script holds:
// the openai client's responses.stream() helper (which throws on a delta whose part was never announced), the AI
// SDK's streamText, and LangChain's ChatOpenAI stream. The last two read reasoning only as summary text.
// Usage: node replay_responses_stream.mjs SSE_FILE SUMMARY(0|1) REASONING TEXT
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { streamText } from "ai";
import { ChatOpenAI } from "@langchain/openai";

const [file, summaryArg, reasoning, text] = process.argv.slice(2);
const summary = summaryArg === "1";
const sse = readFileSync(file, "utf8");
const fetch = async () => new Response(sse, { status: 200, headers: { "content-type": "text/event-stream" } });

// The openai client's helper: its accumulated response must equal the events' deltas.
const client = new OpenAI({ baseURL: "http://replay.invalid/v1", apiKey: "k", fetch, maxRetries: 0 });
const stream = client.responses.stream({ model: "demo", input: "x" });
let reasoned = "", said = "";
stream.on(summary ? "response.reasoning_summary_text.delta" : "response.reasoning_text.delta",
  (e) => { reasoned += e.delta; });
stream.on("response.output_text.delta", (e) => { said += e.delta; });
const final = await stream.finalResponse();
assert.equal(reasoned, reasoning);
assert.equal(said, text);
const item = final.output.find((o) => o.type === "reasoning");
assert.equal((summary ? item.summary : item.content)[0].text, reasoning);
assert.equal(final.output_text, text);

if (summary) {
  const ai = streamText({ model: createOpenAI({ baseURL: "http://replay.invalid/v1", apiKey: "k", fetch })("demo"),
    prompt: "x" });
  assert.equal(await ai.text, text);
  assert.equal(await ai.reasoningText, reasoning);

  const chat = new ChatOpenAI({ model: "demo", apiKey: "k", useResponsesApi: true, maxRetries: 0,
    configuration: { baseURL: "http://replay.invalid/v1", fetch } });
  let lcReasoning = "", lcText = "";
  for await (const chunk of await chat.stream("x")) {
    if (typeof chunk.content === "string") lcText += chunk.content;
    else for (const part of chunk.content) {
      if (part.type === "reasoning") lcReasoning += part.reasoning;
      if (part.type === "text") lcText += part.text;
    }
  }
  assert.equal(lcReasoning, reasoning);
  assert.equal(lcText, text);
}
console.log("replay responses stream: ok");
