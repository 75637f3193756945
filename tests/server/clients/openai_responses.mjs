// The Responses API through the official `openai` client: a whole response, the streamed event sequence, function
// tools with a call's output sent back, and the stream helper with thinking on.
// Usage: node openai_responses.mjs URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: process.argv[3], maxRetries: 0 });
const model = "demo";

const whole = await client.responses.create({ model, input: "Say hello.", instructions: "Be brief.",
  max_output_tokens: 6, temperature: 0, reasoning: { effort: "none" }, store: false });
assert.equal(whole.object, "response");
assert.ok(["completed", "incomplete"].includes(whole.status));
assert.equal(whole.output.at(-1).type, "message");
assert.equal(whole.output_text, whole.output.at(-1).content[0].text);
assert.ok(whole.usage.output_tokens <= 6 && whole.usage.input_tokens > 0);
assert.equal(whole.usage.total_tokens, whole.usage.input_tokens + whole.usage.output_tokens);

// Streamed: the documented order, the same text as the whole answer (greedy), and the final response last.
const stream = await client.responses.create({ model, input: "Say hello.", instructions: "Be brief.",
  max_output_tokens: 6, temperature: 0, reasoning: { effort: "none" }, stream: true });
const types = [];
let text = "", last = null, sequence = -1;
for await (const event of stream) {
  types.push(event.type);
  assert.equal(event.sequence_number, sequence + 1);
  sequence = event.sequence_number;
  if (event.type === "response.output_text.delta") text += event.delta;
  if (event.type === "response.completed" || event.type === "response.incomplete") last = event.response;
}
assert.deepEqual(types.slice(0, 2), ["response.created", "response.in_progress"]);
assert.ok(["response.completed", "response.incomplete"].includes(types.at(-1)));
if (text) {
  const order = ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
    "response.output_text.done", "response.content_part.done", "response.output_item.done"];
  const positions = order.map((t) => types.indexOf(t));
  assert.deepEqual([...positions].sort((a, b) => a - b), positions, types.join(","));
}
assert.equal(text, whole.output_text);
assert.equal(last.usage.output_tokens, whole.usage.output_tokens);

// Thinking on: reasoning comes as a reasoning item before the message (or alone when the budget runs out).
const thinking = await client.responses.create({ model, input: "Why?", max_output_tokens: 8,
  reasoning: { effort: "high" }, temperature: 0 });
assert.equal(thinking.output[0].type, "reasoning");
assert.equal(thinking.output[0].content[0].type, "reasoning_text");

// Tools: flat function tools reach the prompt; a call and its output sent back as items are a valid conversation.
const tools = [{ type: "function", name: "get_weather", description: "Weather for a city", strict: false,
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
const withTools = await client.responses.create({ model, input: "Weather in Oslo?", tools, max_output_tokens: 4,
  reasoning: { effort: "none" } });
assert.ok(withTools.usage.input_tokens > whole.usage.input_tokens);
const followUp = await client.responses.create({ model, tools, max_output_tokens: 4, reasoning: { effort: "none" },
  input: [{ role: "user", content: "Weather in Oslo?" },
    { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\": \"Oslo\"}" },
    { type: "function_call_output", call_id: "call_1", output: "4 C, rain" }] });
assert.ok(followUp.usage.input_tokens > withTools.usage.input_tokens);

// The client's stream helper with thinking on (the default of a reasoning model): it throws on a delta whose part
// was never announced; the reasoning it accumulates equals the deltas, as summary text when a summary is asked.
for (const summary of [undefined, "auto"]) {
  const helper = client.responses.stream({ model, input: "Why?", max_output_tokens: 12, temperature: 0,
    reasoning: { effort: "high", ...(summary ? { summary } : {}) } });
  let reasoned = "";
  helper.on(summary ? "response.reasoning_summary_text.delta" : "response.reasoning_text.delta",
    (e) => { reasoned += e.delta; });
  const final = await helper.finalResponse();
  assert.equal(final.output[0].type, "reasoning");
  assert.ok(reasoned.length > 0, "the demo's reply starts inside <think>");
  assert.equal((summary ? final.output[0].summary : final.output[0].content)[0].text, reasoned);
}
console.log("openai responses: ok");
