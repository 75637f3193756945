// Stored responses through the official `openai` client: store (the default) keeps a response; retrieve,
// inputItems.list and a previous_response_id turn use it; another key sees none of it (404, as for an unknown id);
// delete removes it; store: false keeps nothing. Usage: node openai_stored_responses.mjs URL API_KEY OTHER_KEY
import assert from "node:assert/strict";
import OpenAI, { NotFoundError } from "openai";

const [url, key, otherKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
const other = new OpenAI({ baseURL: `${url}/v1`, apiKey: otherKey, maxRetries: 0 });
const model = "demo";
const settings = { model, max_output_tokens: 4, temperature: 0, reasoning: { effort: "none" } };

const first = await client.responses.create({ ...settings, input: "My name is Ada.", instructions: "Be brief." });
assert.equal(first.store, true);
const kept = await client.responses.retrieve(first.id);
assert.equal(kept.id, first.id);
assert.deepEqual(kept.output, first.output);
assert.deepEqual(kept.usage, first.usage);

const items = await client.responses.inputItems.list(first.id);
assert.equal(items.data.length, 1);
assert.equal(items.data[0].role, "user");
assert.deepEqual(items.data[0].content, [{ type: "input_text", text: "My name is Ada." }]);

// A second turn on the first: its input, then its output, then the new input (its instructions do not carry over).
const second = await client.responses.create({ ...settings, input: "What is my name?",
  previous_response_id: first.id });
assert.equal(second.previous_response_id, first.id);
const alone = await client.responses.create({ ...settings, input: "What is my name?", store: false });
assert.ok(second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens,
  "the earlier turn is in the prompt");
const secondItems = await client.responses.inputItems.list(second.id, { order: "asc" });
assert.deepEqual(secondItems.data.map((i) => i.type), ["message", ...first.output.map((o) => o.type), "message"]);

// The same conversation with the earlier turn sent by reference gives the same prompt.
const byReference = await client.responses.create({ ...settings, store: false, input: [
  { type: "item_reference", id: items.data[0].id },
  ...first.output.map((o) => ({ type: "item_reference", id: o.id })),
  { role: "user", content: "What is my name?" }] });
assert.equal(byReference.usage.input_tokens, second.usage.input_tokens);

// store: false keeps nothing.
await assert.rejects(client.responses.retrieve(alone.id), NotFoundError);

// Another key: the response does not exist for it, whatever it tries.
await assert.rejects(other.responses.retrieve(first.id), NotFoundError);
await assert.rejects(other.responses.inputItems.list(first.id), NotFoundError);
await assert.rejects(other.responses.delete(first.id), NotFoundError);
await assert.rejects(other.responses.create({ ...settings, input: "x", previous_response_id: first.id }),
  (e) => e.status === 404 && e.param === "previous_response_id");
await assert.rejects(other.responses.create({ ...settings, input: [{ type: "item_reference", id: first.output[0].id }] }),
  (e) => e.status === 404 && e.param === "input[0].id");

// Deleted: gone for its own key too, in OpenAI's error shape.
await client.responses.delete(first.id);
await assert.rejects(client.responses.retrieve(first.id), (e) => e instanceof NotFoundError &&
  e.error?.message?.includes(first.id) && e.code === "response_not_found");
console.log("openai stored responses: ok");
