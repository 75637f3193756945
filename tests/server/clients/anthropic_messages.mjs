// Anthropic's Messages API through the official `@anthropic-ai/sdk` client (its `x-api-key` header): a whole message,
// the stream helper with thinking on and off, stop_sequences, tools with a tool_use / tool_result turn, count_tokens
// equal to what a message's usage reports, and refusals in Anthropic's error shape.
// Usage: node anthropic_messages.mjs URL API_KEY
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";

const [url, key] = process.argv.slice(2);
const client = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0 });
const model = "demo";
const base = { model, max_tokens: 12, temperature: 0, thinking: { type: "disabled" } };
const messages = [{ role: "user", content: "Say hello." }];

const whole = await client.messages.create({ ...base, system: "Be brief.", messages });
assert.equal(whole.type, "message");
assert.equal(whole.role, "assistant");
assert.ok(["end_turn", "max_tokens"].includes(whole.stop_reason), whole.stop_reason);
assert.ok(whole.usage.input_tokens > 0 && whole.usage.output_tokens <= 12);
const text = whole.content.filter((b) => b.type === "text").map((b) => b.text).join("");

// Streamed (greedy): the same text, through the SDK's accumulating helper.
const stream = client.messages.stream({ ...base, system: "Be brief.", messages });
let streamed = "";
stream.on("text", (delta) => { streamed += delta; });
const final = await stream.finalMessage();
assert.equal(streamed, text);
assert.deepEqual(final.content.filter((b) => b.type === "text").map((b) => b.text).join(""), text);
assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
assert.equal(final.usage.input_tokens, whole.usage.input_tokens);

// Thinking on: the demo's reply starts inside <think>, so it streams as a thinking block.
const thinkingStream = client.messages.stream({ ...base, thinking: { type: "enabled", budget_tokens: 1024 }, messages });
let thought = "";
thinkingStream.on("thinking", (delta) => { thought += delta; });
const thoughtful = await thinkingStream.finalMessage();
assert.equal(thoughtful.content[0].type, "thinking");
assert.ok(thought.length > 0);
assert.equal(thoughtful.content[0].thinking, thought);

// stop_sequences: a piece of the greedy text ends the reply just before it.
const long = await client.messages.create({ ...base, max_tokens: 24, messages, ignore_eos: true });
const longText = long.content.filter((b) => b.type === "text").map((b) => b.text).join("");
const stop = longText.slice(6, 9);
assert.equal(stop.length, 3, `the greedy text is too short: ${JSON.stringify(longText)}`);
const stopped = await client.messages.create({ ...base, max_tokens: 24, messages, ignore_eos: true,
  stop_sequences: [stop] });
assert.equal(stopped.stop_reason, "stop_sequence");
assert.equal(stopped.stop_sequence, stop);
assert.equal(stopped.content.filter((b) => b.type === "text").map((b) => b.text).join(""),
  longText.slice(0, longText.indexOf(stop)));

// Tools, and a turn that called one and got its result back; count_tokens counts that prompt as the message did.
const tools = [{ name: "get_weather", description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
const conversation = [{ role: "user", content: "Weather in Oslo?" },
  { role: "assistant", content: [{ type: "text", text: "Checking." },
    { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Oslo" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "4 C, rain" }] }];
const withTools = await client.messages.create({ ...base, tools, messages: conversation });
const counted = await client.messages.countTokens({ model, tools, messages: conversation, thinking: { type: "disabled" } });
assert.equal(counted.input_tokens, withTools.usage.input_tokens);
const withoutTools = await client.messages.countTokens({ model, messages: conversation, thinking: { type: "disabled" } });
assert.ok(counted.input_tokens > withoutTools.input_tokens, "the tools reach the prompt");

// Refusals: Anthropic's error shape (an image block whose bytes are no image names the block and why), and a wrong
// key.
await assert.rejects(client.messages.create({ ...base, messages: [{ role: "user", content: [{ type: "image",
  source: { type: "base64", media_type: "image/png", data: "AA==" } }] }] }),
  (e) => e instanceof Anthropic.BadRequestError && e.error?.type === "error" &&
    e.error?.error?.type === "invalid_request_error" &&
    /^messages\[0\]\.content\[0\]: .*not a PNG, JPEG, WebP or GIF/.test(e.error.error.message));
const stranger = new Anthropic({ baseURL: url, apiKey: "sk-wrong", maxRetries: 0 });
await assert.rejects(stranger.messages.create({ ...base, messages }), Anthropic.AuthenticationError);
console.log("anthropic messages: ok");
