// One image through the official clients on every chat-like route (issue 21): the `openai` client's chat completions
// (an image_url part) and Responses API (an input_image part), and `@anthropic-ai/sdk`'s Messages API (a base64 image
// block, and count_tokens), against a server whose model has a vision tower; the Vercel AI SDK and LangChain over
// both OpenAI APIs too. Greedy with thinking off, the three
// build the same prompt, so they give the same reply: chat's token ids are the golden ids the test passes (transformers'
// own), and Responses and Messages give its text and usage. The planted control: another image of the same size gives
// another reply, the same on all three. Hostile images and remote URLs come back as each SDK's BadRequestError naming
// the part.
// Usage: node images.mjs URL API_KEY MODEL IMAGES_DIR GOLDEN_IDS (comma-separated)
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText } from "ai";
import { ChatOpenAI } from "@langchain/openai";
import { HumanMessage } from "@langchain/core/messages";

const [url, key, model, images, goldenIds] = process.argv.slice(2);
const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0 });
const golden = goldenIds.split(",").map(Number);
const maxTokens = golden.length;

const bytesOf = (name) => readFileSync(`${images}/${name}`);
const dataUrl = (bytes, type = "image/png") => `data:${type};base64,${bytes.toString("base64")}`;

async function chat(imageUrl) {
  const reply = await openai.chat.completions.create({ model, max_tokens: maxTokens, temperature: 0,
    return_token_ids: true, chat_template_kwargs: { enable_thinking: false },
    messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: imageUrl, detail: "auto" } }] }] });
  return { text: reply.choices[0].message.content, ids: reply.choices[0].token_ids,
    inputTokens: reply.usage.prompt_tokens, outputTokens: reply.usage.completion_tokens };
}

async function responses(imageUrl) {
  const reply = await openai.responses.create({ model, max_output_tokens: maxTokens, temperature: 0,
    reasoning: { effort: "none" }, store: false,
    input: [{ role: "user", content: [{ type: "input_image", image_url: imageUrl, detail: "auto" }] }] });
  return { text: reply.output_text, inputTokens: reply.usage.input_tokens, outputTokens: reply.usage.output_tokens };
}

const block = (bytes, mediaType = "image/png") =>
  ({ type: "image", source: { type: "base64", media_type: mediaType, data: bytes.toString("base64") } });

async function messages(content) {
  const request = { model, thinking: { type: "disabled" }, messages: [{ role: "user", content }] };
  const reply = await anthropic.messages.create({ ...request, max_tokens: maxTokens, temperature: 0 });
  const counted = await anthropic.messages.countTokens(request);
  assert.equal(counted.input_tokens, reply.usage.input_tokens, "count_tokens counts the image as the message did");
  return { text: reply.content.filter((b) => b.type === "text").map((b) => b.text).join(""),
    inputTokens: reply.usage.input_tokens, outputTokens: reply.usage.output_tokens };
}

const png = bytesOf("small_png.png");
const onChat = await chat(dataUrl(png));
assert.deepEqual(onChat.ids, golden, "chat gives transformers' greedy ids");
const onResponses = await responses(dataUrl(png));
const onMessages = await messages([block(png)]);
for (const [route, reply] of [["responses", onResponses], ["messages", onMessages]]) {
  assert.equal(reply.text, onChat.text, route);
  assert.equal(reply.inputTokens, onChat.inputTokens, route);
  assert.equal(reply.outputTokens, onChat.outputTokens, route);
}
// The Vercel AI SDK (chat and its default Responses provider) and LangChain (ChatOpenAI with and without
// useResponsesApi) send the image bytes as data URLs: the same reply. Thinking is turned off in their bodies.
const thinkingOff = (target, init) => {
  const body = JSON.parse(init.body);
  if (String(target).endsWith("/chat/completions")) body.chat_template_kwargs = { enable_thinking: false };
  else body.reasoning = { ...body.reasoning, effort: "none" };
  return fetch(target, { ...init, body: JSON.stringify(body) });
};
const aiSdk = createOpenAI({ baseURL: `${url}/v1`, apiKey: key, fetch: thinkingOff });
for (const [name, sdkModel] of [["ai sdk chat", aiSdk.chat(model)], ["ai sdk responses", aiSdk(model)]]) {
  const reply = await generateText({ model: sdkModel, maxOutputTokens: maxTokens, temperature: 0, maxRetries: 0,
    messages: [{ role: "user", content: [{ type: "image", image: new Uint8Array(png), mediaType: "image/png" }] }] });
  assert.equal(reply.text, onChat.text, name);
  assert.equal(reply.usage.inputTokens, onChat.inputTokens, name);
}
for (const useResponsesApi of [false, true]) {
  const chatModel = new ChatOpenAI({ model, apiKey: key, temperature: 0, maxTokens, maxRetries: 0, useResponsesApi,
    configuration: { baseURL: `${url}/v1`, fetch: thinkingOff } });
  const reply = await chatModel.invoke([new HumanMessage({ content: [
    { type: "image_url", image_url: { url: dataUrl(png) } }] })]);
  assert.equal(reply.text, onChat.text, `langchain, useResponsesApi ${useResponsesApi}`);
  assert.equal(reply.usage_metadata.input_tokens, onChat.inputTokens, `langchain, useResponsesApi ${useResponsesApi}`);
}

// A media type that disagrees with the bytes: the bytes decide, as for chat's data URLs.
assert.equal((await messages([block(png, "image/webp")])).text, onChat.text);

// The planted control: another image of the same grid gives another reply, the same on every route.
const gray = bytesOf("gray_png.png");
const grayChat = await chat(dataUrl(gray));
assert.notDeepEqual(grayChat.ids, golden);
assert.notEqual(grayChat.text, onChat.text);
assert.equal(grayChat.inputTokens, onChat.inputTokens, "the same grid");
assert.equal((await responses(dataUrl(gray))).text, grayChat.text);
assert.equal((await messages([block(gray)])).text, grayChat.text);

// Hostile images and remote URLs: a 400 naming the part, in each API's own error shape.
const truncated = png.subarray(0, png.length >> 1);
await assert.rejects(responses(dataUrl(truncated)), (e) => e instanceof OpenAI.BadRequestError &&
  e.param === "input[0].content[0]" && e.code === "invalid_image");
await assert.rejects(responses("https://example.com/cat.png"), (e) => e instanceof OpenAI.BadRequestError &&
  e.param === "input[0].content[0].image_url" && /not fetched/.test(e.message));
await assert.rejects(messages([{ type: "text", text: "Look: " }, block(truncated)]),
  (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === "invalid_request_error" &&
    /^messages\[0\]\.content\[1\]: /.test(e.error.error.message));
await assert.rejects(messages([{ type: "image", source: { type: "url", url: "https://example.com/cat.png" } }]),
  (e) => e instanceof Anthropic.BadRequestError &&
    /^messages\[0\]\.content\[0\]\.source\.url: remote image URLs are not fetched/.test(e.error.error.message));
console.log("images on every route: ok");
