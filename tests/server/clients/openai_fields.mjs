// Every chat/completions field OpenAI documents, sent through the official `openai` client with a value and then
// with null (null is absent): each is answered 200, and those that are honoured show it.
// Usage: node openai_fields.mjs URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: process.argv[3], maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const messages = [
  { role: "developer", content: "Be brief.", name: "ops" },
  { role: "user", content: [{ type: "text", text: "Weather in Oslo?", cache_control: { type: "ephemeral" } }] },
  { role: "assistant", content: null, audio: null, function_call: null, refusal: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Oslo\"}" } }] },
  { role: "tool", tool_call_id: "call_1", content: "4 C, rain" },
  { role: "user", content: "Thanks. And tomorrow?" },
];

const withValues = {
  model, messages, tools, tool_choice: "auto", parallel_tool_calls: false,
  max_completion_tokens: 6, temperature: 0.7, top_p: 0.9, n: 1, stop: ["\n\n\n", "END"], seed: 7,
  presence_penalty: 0.1, frequency_penalty: 0.1, logit_bias: {}, logprobs: true, top_logprobs: 2,
  user: "user-42", safety_identifier: "sid-42", prompt_cache_key: "weather-agent", reasoning_effort: "low",
  verbosity: "low", modalities: ["text"], store: false, metadata: { run: "fields" }, service_tier: "auto",
  response_format: { type: "text" },
};
const whole = await client.chat.completions.create(withValues);
assert.equal(whole.object, "chat.completion");
assert.ok(whole.usage.completion_tokens <= 6);
assert.equal(whole.choices[0].logprobs.content.length, whole.usage.completion_tokens);

// The same with stream options, including include_obfuscation.
const stream = await client.chat.completions.create({
  ...withValues, stream: true, stream_options: { include_usage: true, include_obfuscation: false } });
let usage = null;
for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);

// Every optional field null: the same as leaving it out.
const nulls = Object.fromEntries(Object.keys(withValues).filter((k) => k !== "model" && k !== "messages")
  .map((k) => [k, null]));
const withNulls = await client.chat.completions.create({
  model, messages, ...nulls, max_tokens: 3, stream_options: null, audio: null, function_call: null, functions: null,
  prediction: null, web_search_options: null });
assert.equal(withNulls.object, "chat.completion");
const plain = await client.chat.completions.create({ model, messages, max_tokens: 3 });
assert.equal(withNulls.usage.prompt_tokens, plain.usage.prompt_tokens);

// reasoning_effort is the template's thinking switch: "none" renders as enable_thinking false, an effort as true.
const promptTokens = async (extra) =>
  (await client.chat.completions.create({ model, messages, max_tokens: 1, ...extra })).usage.prompt_tokens;
assert.equal(await promptTokens({ reasoning_effort: "none" }),
             await promptTokens({ chat_template_kwargs: { enable_thinking: false } }));
assert.equal(await promptTokens({ reasoning_effort: "high" }),
             await promptTokens({ chat_template_kwargs: { enable_thinking: true } }));
assert.notEqual(await promptTokens({ reasoning_effort: "none" }), await promptTokens({ reasoning_effort: "high" }));

// n choices: each its own sample (choice i seeded seed + i), the prompt counted once, completions summed; streamed,
// every chunk names its choice and each choice finishes.
const three = await client.chat.completions.create({ model, messages, n: 3, max_tokens: 6, seed: 5, temperature: 1,
  ignore_eos: true });
assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
assert.equal(three.usage.completion_tokens, 18);
assert.equal(three.usage.prompt_tokens, plain.usage.prompt_tokens);
assert.ok(new Set(three.choices.map((c) => c.message.content)).size > 1, "sampled choices differ");
const first = await client.chat.completions.create({ model, messages, max_tokens: 6, seed: 5, temperature: 1,
  ignore_eos: true });
assert.equal(first.choices[0].message.content, three.choices[0].message.content, "choice 0 is the request alone");
// The later choices start from a copy of the first's prefilled state (one prefill): each is still exactly the request
// alone with seed + i.
for (const i of [1, 2]) {
  const alone = await client.chat.completions.create({ model, messages, max_tokens: 6, seed: 5 + i, temperature: 1,
    ignore_eos: true });
  assert.equal(alone.choices[0].message.content, three.choices[i].message.content, `choice ${i} is seed + ${i} alone`);
}
const greedyPair = await client.chat.completions.create({ model, messages, n: 2, max_tokens: 6, temperature: 0 });
assert.equal(greedyPair.choices[0].message.content, greedyPair.choices[1].message.content);
const nStream = await client.chat.completions.create({ model, messages, n: 2, max_tokens: 4, temperature: 1,
  ignore_eos: true, stream: true, stream_options: { include_usage: true } });
const texts = ["", ""], finishes = [null, null];
let nUsage = null;
for await (const chunk of nStream) {
  if (chunk.usage) nUsage = chunk.usage;
  for (const choice of chunk.choices) {
    texts[choice.index] += choice.delta.content ?? "";
    if (choice.finish_reason) finishes[choice.index] = choice.finish_reason;
  }
}
assert.deepEqual(finishes, ["length", "length"]);
assert.equal(nUsage.completion_tokens, 8);
const completionPair = await client.completions.create({ model, prompt: "Once", n: 2, max_tokens: 3, temperature: 0 });
assert.deepEqual(completionPair.choices.map((c) => c.index), [0, 1]);
assert.equal(completionPair.choices[0].text, completionPair.choices[1].text);

// logit_bias: +100 forces a token, -100 bans one (ids as the completion's token_ids give them).
const ids = async (extra) => (await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 4,
  temperature: 0, ignore_eos: true, return_token_ids: true, ...extra })).choices[0].token_ids;
const greedyIds = await ids({});
const forced = greedyIds[0] + 1;
assert.deepEqual(await ids({ logit_bias: { [forced]: 100 }, temperature: 1, seed: 9 }), [forced, forced, forced, forced]);
assert.notEqual((await ids({ logit_bias: { [greedyIds[0]]: -100 } }))[0], greedyIds[0]);
const chatForced = await client.chat.completions.create({ model, messages, max_tokens: 3, ignore_eos: true,
  logit_bias: { [forced]: 100 }, return_token_ids: true });
assert.deepEqual(chatForced.choices[0].token_ids, [forced, forced, forced]);
await assert.rejects(client.completions.create({ model, prompt: "x", logit_bias: { 99999999: 5 } }),
  (e) => e.status === 400);

// A budget above what the context leaves is fitted to it: finish_reason length, not a refusal.
const big = await client.chat.completions.create({ model, messages, max_tokens: 100000, ignore_eos: true,
  temperature: 0 });
assert.equal(big.choices[0].finish_reason, "length");
assert.equal(big.usage.prompt_tokens + big.usage.completion_tokens, (await client.models.retrieve(model)).max_model_len);

// Completions: its fields with values, then null.
const completionValues = { model, prompt: "Once upon a time", max_tokens: 4, temperature: 0.5, top_p: 0.9, n: 1,
  stop: "\n\n", seed: 3, presence_penalty: 0, frequency_penalty: 0, logit_bias: {}, logprobs: 1, echo: false,
  suffix: "", best_of: 1, user: "user-42" };
const completion = await client.completions.create(completionValues);
assert.equal(completion.object, "text_completion");
const completionNulls = Object.fromEntries(Object.keys(completionValues)
  .filter((k) => k !== "model" && k !== "prompt").map((k) => [k, null]));
assert.equal((await client.completions.create({ model, prompt: "Once", ...completionNulls })).object,
             "text_completion");

// A wrong type is still named.
await assert.rejects(client.chat.completions.create({ model, messages, reasoning_effort: 3 }),
  (e) => e.status === 400 && e.param === "reasoning_effort");
await assert.rejects(client.chat.completions.create({ model, messages, modalities: ["audio"] }),
  (e) => e.status === 400 && e.param === "modalities[0]");
console.log("openai fields: ok");
