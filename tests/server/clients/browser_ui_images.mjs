// The page GET / answers, sending images (headless Debian chromium, puppeteer-core): a file picked in the chat goes out
// as an image_url part with the file's bytes in a data: URL before the message's text, shows as a thumbnail in the
// conversation, and the streamed reply equals the official openai client's greedy answer to the same request (on a
// server with a vision tower); the image stays in the history for the next turn; a pasted and a dropped image are
// attached too, and a click on a pending thumbnail removes it. On a server that reads no images (--no-vision) the page
// shows the server's own refusal (the status-400 error's message), and the refused message leaves the conversation.
// Usage: node browser_ui_images.mjs VISION_URL TEXT_ONLY_URL API_KEY IMAGE.png
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";
import puppeteer from "puppeteer-core";

const [visionUrl, textUrl, key, imagePath] = process.argv.slice(2);
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";
const dataUrl = "data:image/png;base64," + readFileSync(imagePath).toString("base64");

const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu"] });
const errors = [];

// A page on `url` with the key set, greedy, 8 tokens, no thinking; `bodies` collects the chat requests it sends.
async function open(url) {
  const page = await browser.newPage();
  const bodies = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });  // a CSP refusal shows here
  page.on("request", (r) => { if (r.url().endsWith("/v1/chat/completions")) bodies.push(JSON.parse(r.postData())); });
  await page.goto(`${url}/`);
  const set = (selector, value) => page.$eval(selector, (el, v) => { el.value = v; }, value);
  await set("#key", key);
  await set("#temperature", "0");
  await set("#max-tokens", "8");
  await page.$eval("#thinking", (el) => { el.checked = false; });
  return { page, bodies };
}

// Picks the image in the file input, types `text` and sends; returns once the reply (or the refusal) is done.
async function sendImage(page, text, nth) {
  await (await page.$("#image")).uploadFile(imagePath);
  await page.waitForSelector("#attachments img.thumb");
  assert.equal(await page.$eval("#attachments img.thumb", (img) => img.src), dataUrl);
  await page.type("#prompt", text);
  await page.click("#send");
  await page.waitForSelector(`.turn.assistant:nth-of-type(${nth})[data-done=true]`);
}

// A File with the image's bytes, handed to the page's paste or drop handler as a browser hands it.
async function pasteOrDrop(page, kind) {
  await page.evaluate((kind, url) => {
    // Not fetch(url): the page's Content-Security-Policy lets it connect to its own origin only.
    const bytes = Uint8Array.from(atob(url.slice(url.indexOf(",") + 1)), (c) => c.charCodeAt(0));
    const transfer = new DataTransfer();
    transfer.items.add(new File([bytes], "pasted.png", { type: "image/png" }));
    const event = kind === "paste" ? new ClipboardEvent("paste", { clipboardData: transfer, bubbles: true })
                                   : new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true });
    document.querySelector(kind === "paste" ? "#prompt" : "#messages").dispatchEvent(event);
  }, kind, dataUrl);
}

try {
  // With a vision tower: the request's parts, the thumbnail, and the openai client's answer to the same messages.
  const { page, bodies } = await open(visionUrl);
  await sendImage(page, "What is in the image?", 2);
  const parts = [{ type: "image_url", image_url: { url: dataUrl } }, { type: "text", text: "What is in the image?" }];
  assert.equal(bodies.length, 1);
  assert.deepEqual(bodies[0].messages, [{ role: "user", content: parts }]);
  assert.equal(await page.$eval("#chat-error", (el) => el.textContent), "");
  assert.equal(await page.$eval(".turn.user img.thumb", (img) => img.src), dataUrl);
  assert.equal(await page.$eval(".turn.user", (el) => el.textContent), "What is in the image?");
  assert.equal(await page.$$eval("#attachments img", (imgs) => imgs.length), 0);
  assert.ok(await page.$eval(".turn.user img.thumb", (img) => img.complete && img.naturalWidth > 0),
    "the thumbnail did not render (the page's Content-Security-Policy must allow data: images)");
  const shown = await page.$eval(".turn.assistant .content", (el) => el.textContent);
  const client = new OpenAI({ baseURL: `${visionUrl}/v1`, apiKey: key, maxRetries: 0 });
  const model = (await client.models.list()).data[0].id;
  const reference = await client.chat.completions.create({ model, temperature: 0, max_tokens: 8,
    messages: [{ role: "user", content: parts }], chat_template_kwargs: { enable_thinking: false } });
  assert.equal(shown, reference.choices[0].message.content ?? "");
  assert.ok(reference.usage.prompt_tokens > 20, `prompt_tokens ${reference.usage.prompt_tokens}: no image tokens?`);

  // The next turn sends the image again, as the conversation's first message.
  await page.type("#prompt", "And its colours?");
  await page.click("#send");
  await page.waitForSelector(".turn.assistant:nth-of-type(4)[data-done=true]");
  assert.deepEqual(bodies[1].messages.map((m) => m.role), ["user", "assistant", "user"]);
  assert.deepEqual(bodies[1].messages[0].content, parts);
  assert.equal(bodies[1].messages[2].content, "And its colours?");

  // Paste and drop attach the image; a click on a pending thumbnail removes it.
  await pasteOrDrop(page, "paste");
  await page.waitForFunction(() => document.querySelectorAll("#attachments img").length === 1);
  await pasteOrDrop(page, "drop");
  await page.waitForFunction(() => document.querySelectorAll("#attachments img").length === 2);
  await page.click("#attachments img");
  assert.equal(await page.$$eval("#attachments img", (imgs) => imgs.length), 1);
  await page.click("#send");  // an image alone, no text
  await page.waitForSelector(".turn.assistant:nth-of-type(6)[data-done=true]");
  assert.deepEqual(bodies[2].messages.at(-1), { role: "user", content: [{ type: "image_url", image_url: { url: dataUrl } }] });
  assert.equal(await page.$eval("#chat-error", (el) => el.textContent), "");

  // Without a vision tower: the server's refusal is shown, and the refused message is not sent again.
  const text = await open(textUrl);
  await sendImage(text.page, "What is in the image?", 2);
  const direct = await fetch(`${textUrl}/v1/chat/completions`, { method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: parts }], max_tokens: 8 }) });
  assert.equal(direct.status, 400);
  const refusal = (await direct.json()).error.message;
  assert.match(refusal, /messages\[0\]\.content\[0\]: .*--no-vision/);
  assert.equal(await text.page.$eval("#chat-error", (el) => el.textContent), refusal);
  assert.ok(await text.page.$eval(".turn.user", (el) => el.classList.contains("refused")));
  await text.page.type("#prompt", "Say hello.");
  await text.page.click("#send");
  await text.page.waitForSelector(".turn.assistant:nth-of-type(4)[data-done=true]");
  assert.deepEqual(text.bodies[1].messages, [{ role: "user", content: "Say hello." }]);
  assert.equal(await text.page.$eval("#chat-error", (el) => el.textContent), "");
  assert.deepEqual(errors.filter((e) => !e.includes("status of 400")), []);  // the refusal's own console line
} finally {
  await browser.close();
}
console.log("browser ui images: ok");
