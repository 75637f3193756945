// Talks to a running `duet serve` with the official OpenAI npm client: chat and completions, streaming and
// not, tools, stop strings, seeds, logprobs, and errors. Usage: node openai_client.mjs http://127.0.0.1:PORT
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: "not-needed", maxRetries: 0 });
const messages = [{ role: "user", content: "Say hello." }];

const models = await client.models.list();
const model = models.data[0].id;
assert.equal(models.data.length, 1);

// Chat, whole answer.
const chat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
assert.ok(["stop", "length"].includes(chat.choices[0].finish_reason));
assert.ok(chat.usage.completion_tokens <= 8 && chat.usage.prompt_tokens > 0);

// Chat, streamed, usage in the last chunk.
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let streamed = "", finish = null, usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    streamed += choice.delta.content ?? "";
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
assert.ok(finish === "stop" || finish === "length");
assert.equal(usage.completion_tokens, chat.usage.completion_tokens);
assert.equal(streamed, chat.choices[0].message.content ?? "");  // greedy: same text both ways

// Tools reach the template (the prompt grows) and the request is answered.
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const withTools = await client.chat.completions.create({ model, messages, tools, max_tokens: 4, temperature: 0 });
assert.ok(withTools.usage.prompt_tokens > chat.usage.prompt_tokens);
assert.ok(["stop", "length", "tool_calls"].includes(withTools.choices[0].finish_reason));

// Logprobs in chat.
const lp = await client.chat.completions.create({
  model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
assert.equal(lp.choices[0].logprobs.content.length, lp.usage.completion_tokens);
for (const entry of lp.choices[0].logprobs.content) {
  assert.equal(typeof entry.logprob, "number");
  assert.equal(entry.top_logprobs.length, 2);
}

// Seeds: the same seed gives the same sample.
const seeded = (seed) => client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 12, temperature: 1, seed, ignore_eos: true });
const [a, b] = await Promise.all([seeded(11), seeded(11)]);
assert.equal(a.choices[0].text, b.choices[0].text);

// Completions: logprobs and a stop string taken from a greedy answer.
const greedy = await client.completions.create({
  model, prompt: "The weather today is", max_tokens: 16, temperature: 0, logprobs: 1, ignore_eos: true });
const tokens = greedy.choices[0].logprobs.tokens;
assert.equal(tokens.length, 16);
const stopText = tokens.slice(3).find((t) => t.trim().length > 0 && !t.includes("\ufffd"));
if (stopText) {
  const full = greedy.choices[0].text;
  const stopped = await client.completions.create({
    model, prompt: "The weather today is", max_tokens: 16, temperature: 0, stop: [stopText], ignore_eos: true });
  assert.equal(stopped.choices[0].finish_reason, "stop");
  assert.equal(stopped.choices[0].text, full.slice(0, full.indexOf(stopText)));
}

// Completions, streamed.
const cstream = await client.completions.create({
  model, prompt: "The weather today is", max_tokens: 16, temperature: 0, stream: true, ignore_eos: true });
let ctext = "";
for await (const chunk of cstream) ctext += chunk.choices[0]?.text ?? "";
assert.equal(ctext, greedy.choices[0].text);

// Errors come back as the client's typed errors.
await assert.rejects(client.models.retrieve("no-such-model"), (e) => e.status === 404);
await assert.rejects(
  client.chat.completions.create({ model, messages, temperature: "hot" }),
  (e) => e.status === 400 && e.param === "temperature");
await assert.rejects(
  client.chat.completions.create({ model: "gpt-4o", messages }),
  (e) => e.status === 404 && e.code === "model_not_found");
await assert.rejects(
  client.chat.completions.create({ model, messages, n: 17 }),  // more choices than a request may ask
  (e) => e.status === 400 && e.param === "n");

console.log("openai client: ok");
