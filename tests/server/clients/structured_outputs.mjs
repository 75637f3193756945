// Structured outputs through the official clients against duet on the demo model (a tiny model trained on prose: it
// never "wants" the schema, so every valid document is the grammar's doing): the openai client's response_format
// (json_schema, streamed and not, several seeds; json_object), the Responses API's text.format, completions'
// response_format, and the Vercel AI SDK's generateObject / streamObject with zod schemas. Every object is validated
// by ajv (with ajv-formats). Refusals: a keyword duet cannot honour is a 400 naming its schema path.
// Usage: node structured_outputs.mjs URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, streamObject } from "ai";
import { z } from "zod";
import { ChatOpenAI } from "@langchain/openai";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [url, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey });
const ajv = new Ajv2020({ strict: false });
addFormats(ajv, { mode: "full" });
const validated = (schema, text, what) => {
  const value = JSON.parse(text);
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${what}: ${text}: ${ajv.errorsText(validate.errors)}`);
  return value;
};

const schemas = {
  person: { type: "object", properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 120 },
    code: { type: "string", pattern: "^[A-Z]{3}-\\d{2}$" }, tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 } },
    required: ["name", "age", "tags"], additionalProperties: false },
  event: { type: "object", properties: { when: { type: "string", format: "date-time" }, id: { type: "string", format: "uuid" },
    score: { anyOf: [{ type: "number", minimum: 0, maximum: 1 }, { type: "null" }] } }, required: ["when", "id", "score"],
    additionalProperties: false },
  tree: { $defs: { node: { type: "object", properties: { v: { type: "integer", minimum: 0, maximum: 9 },
    kids: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 } }, required: ["v", "kids"], additionalProperties: false } },
    $ref: "#/$defs/node" },
};

let documents = 0;
for (const [name, schema] of Object.entries(schemas)) {
  for (const seed of [1, 2, 3]) {
    const body = { model: "demo", messages: [{ role: "user", content: `Give me a ${name}.` }], seed, max_tokens: 400,
      response_format: { type: "json_schema", json_schema: { name, schema, strict: true } } };
    const reply = await client.chat.completions.create(body);
    assert.equal(reply.choices[0].finish_reason, "stop", JSON.stringify(reply.choices[0]));
    validated(schema, reply.choices[0].message.content, `chat ${name} seed ${seed}`);
    // Streamed: the same seed gives the same document, chunk by chunk.
    let streamed = "";
    for await (const chunk of await client.chat.completions.create({ ...body, stream: true }))
      streamed += chunk.choices[0]?.delta?.content ?? "";
    assert.equal(streamed, reply.choices[0].message.content);
    documents += 2;
  }
}

const any = await client.chat.completions.create({ model: "demo", messages: [{ role: "user", content: "JSON please" }],
  seed: 4, max_tokens: 400, response_format: { type: "json_object" } });
const anyValue = JSON.parse(any.choices[0].message.content);
assert.ok(any.choices[0].finish_reason === "length" || (typeof anyValue === "object" && !Array.isArray(anyValue)));
documents += 1;

const response = await client.responses.create({ model: "demo", input: "An event, please.", max_output_tokens: 400,
  text: { format: { type: "json_schema", name: "event", schema: schemas.event, strict: true } } });
validated(schemas.event, response.output_text, "responses");
documents += 1;

const completion = await client.completions.create({ model: "demo", prompt: "person:", max_tokens: 400, seed: 9,
  response_format: { type: "json_schema", json_schema: { name: "person", schema: schemas.person } } });
validated(schemas.person, completion.choices[0].text, "completions");
documents += 1;

// Refused by name, with the schema path.
await assert.rejects(
  client.chat.completions.create({ model: "demo", messages: [{ role: "user", content: "x" }],
    response_format: { type: "json_schema", json_schema: { name: "x", strict: true,
      schema: { type: "object", properties: { a: { type: "string", not: { const: "b" } } } } } } }),
  (e) => e.status === 400 && /properties\/a/.test(e.message) && /not/.test(e.message) &&
    e.param === "response_format.json_schema.schema");

// The Vercel AI SDK with zod: generateObject and streamObject over chat completions and over the Responses API.
const provider = createOpenAI({ baseURL: `${url}/v1`, apiKey });
const recipe = z.object({ title: z.string().max(16), minutes: z.number().int().min(1).max(90),
  steps: z.array(z.string().max(10)).max(3), vegetarian: z.boolean() });
const recipeSchema = z.toJSONSchema(recipe);
for (const model of [provider.chat("demo"), provider("demo")]) {
  const { object } = await generateObject({ model, schema: recipe, prompt: "A recipe.", maxOutputTokens: 400, seed: 5 });
  validated(recipeSchema, JSON.stringify(object), "generateObject");
  const stream = streamObject({ model, schema: recipe, prompt: "A recipe.", maxOutputTokens: 400, seed: 6 });
  for await (const _ of stream.partialObjectStream);
  validated(recipeSchema, JSON.stringify(await stream.object), "streamObject");
  documents += 2;
}
// LangChain's withStructuredOutput with a JSON Schema (method jsonSchema: response_format json_schema), over chat
// completions and over the Responses API.
for (const useResponsesApi of [false, true]) {
  const chat = new ChatOpenAI({ model: "demo", apiKey, configuration: { baseURL: `${url}/v1` }, maxTokens: 400,
    useResponsesApi });
  const structured = chat.withStructuredOutput(recipeSchema, { method: "jsonSchema", name: "recipe", strict: true });
  const object = await structured.invoke("A recipe.");
  validated(recipeSchema, JSON.stringify(object), `langchain ${useResponsesApi ? "responses" : "chat"}`);
  documents += 1;
}
console.log(`structured outputs: ok (${documents} documents valid)`);
