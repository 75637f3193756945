// Strict tool calls through the official openai client against duet on the demo model (tiny, trained on prose and
// never on tool calls: it never "wants" a schema, so every valid call is the grammar's doing): tools with "strict":
// true and tool_choice required, a named function, and auto; streamed and not; several seeds. Every call's arguments
// are validated by ajv (with ajv-formats) against its tool's parameters. Planted controls: the same request without
// strict and without a forced call yields no valid call (the model alone never writes one), and a valid call's
// arguments with one value broken fail the same validation.
// Usage: node strict_tools.mjs URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [url, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey });
const ajv = new Ajv2020({ strict: false });
addFormats(ajv, { mode: "full" });

const weather = { type: "function", function: { name: "get_weather", description: "Weather in a city", strict: true,
  parameters: { type: "object", properties: {
    city: { type: "string", maxLength: 20 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 14 },
    when: { anyOf: [{ type: "string", format: "date" }, { type: "null" }] } },
    required: ["city", "unit", "days", "when"], additionalProperties: false } } };
const booking = { type: "function", function: { name: "book_room", strict: true,
  parameters: { type: "object", properties: {
    guests: { type: "array", items: { type: "object", properties: { name: { type: "string", maxLength: 10 },
      age: { type: ["integer", "null"], minimum: 0, maximum: 120 } }, required: ["name", "age"],
      additionalProperties: false }, minItems: 1, maxItems: 3 },
    nights: { type: "number", minimum: 0.5, maximum: 30 },
    breakfast: { type: "boolean" },
    code: { type: "string", pattern: "^[A-Z]{3}-\\d{2}$" } },
    required: ["guests", "nights", "breakfast", "code"], additionalProperties: false } } };
const tools = [weather, booking];
const schemaOf = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));

// The calls' names and parsed arguments, each validated; returns how many there were.
const validCalls = (calls, what) => {
  assert.ok(calls && calls.length > 0, `${what}: no tool call`);
  for (const call of calls) {
    const schema = schemaOf[call.function.name];
    assert.ok(schema, `${what}: unknown function ${call.function.name}`);
    const args = JSON.parse(call.function.arguments);
    const validate = ajv.compile(schema);
    assert.ok(validate(args), `${what}: ${call.function.arguments}: ${ajv.errorsText(validate.errors)}`);
  }
  return calls.length;
};

const ask = (extra) => ({ model: "demo", messages: [{ role: "user", content: "Plan my trip." }], tools,
  max_tokens: 600, ...extra });
let checked = 0;
for (const seed of [1, 2, 3, 4]) {
  for (const tool_choice of ["required", { type: "function", function: { name: seed % 2 ? "book_room" : "get_weather" } }]) {
    const what = `seed ${seed} tool_choice ${JSON.stringify(tool_choice)}`;
    const body = ask({ seed, tool_choice, parallel_tool_calls: false });
    const reply = await client.chat.completions.create(body);
    assert.equal(reply.choices[0].finish_reason, "tool_calls", `${what}: ${JSON.stringify(reply.choices[0])}`);
    checked += validCalls(reply.choices[0].message.tool_calls, what);
    if (typeof tool_choice === "object")
      assert.equal(reply.choices[0].message.tool_calls[0].function.name, tool_choice.function.name);
    // Streamed: the same seed gives the same call, its arguments assembled from the deltas.
    const streamed = {};
    for await (const chunk of await client.chat.completions.create({ ...body, stream: true }))
      for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
        const c = (streamed[d.index] ??= { function: { name: "", arguments: "" } });
        c.function.name += d.function?.name ?? "";
        c.function.arguments += d.function?.arguments ?? "";
      }
    const streamedCalls = Object.values(streamed);
    validCalls(streamedCalls, `${what} streamed`);
    assert.deepEqual(streamedCalls.map((c) => JSON.parse(c.function.arguments)),
      reply.choices[0].message.tool_calls.map((c) => JSON.parse(c.function.arguments)));
  }
}

// auto with strict tools: free text, then calls or nothing; every call that comes is valid.
let autoCalls = 0;
for (const seed of [5, 6, 7]) {
  const reply = await client.chat.completions.create(ask({ seed, max_tokens: 200 }));
  const calls = reply.choices[0].message.tool_calls;
  if (calls && calls.length) autoCalls += validCalls(calls, `auto seed ${seed}`);
}

// Planted control 1: no strict, no forced call: the demo model writes no valid call on its own.
const loose = tools.map((t) => ({ ...t, function: { ...t.function, strict: false } }));
let looseValid = 0;
for (const seed of [1, 2, 3]) {
  const reply = await client.chat.completions.create({ ...ask({ seed, max_tokens: 200 }), tools: loose });
  try {
    validCalls(reply.choices[0].message.tool_calls, "loose");
    looseValid += 1;
  } catch (e) {}
}
assert.equal(looseValid, 0, "the unconstrained model produced valid calls: the checks above could not fail");

// Planted control 2: a valid call with one value broken fails the same validation.
const good = await client.chat.completions.create(ask({ seed: 1, tool_choice: "required" }));
const call = good.choices[0].message.tool_calls[0];
const broken = { ...call, function: { ...call.function, arguments: JSON.stringify({ ...JSON.parse(call.function.arguments),
  [call.function.name === "get_weather" ? "days" : "nights"]: "many" }) } };
assert.throws(() => validCalls([broken], "broken"));

// A keyword a strict tool cannot honour is refused naming the tool and the schema path.
await assert.rejects(client.chat.completions.create(ask({ tools: [{ type: "function", function: { name: "f",
  strict: true, parameters: { type: "object", properties: { n: { type: "number", multipleOf: 3 } } } } }] })),
  (e) => e.status === 400 && /tools\[0\]\.function\.parameters\/properties\/n/.test(e.message));

console.log(`strict tools: ok (${checked} forced calls valid, ${autoCalls} calls under auto)`);
