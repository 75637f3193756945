// A real browser (Debian's chromium, headless, driven by puppeteer-core) calling duet from another origin, as a web
// page does: a page served from PAGE_PORT on loopback fetches duet with `Authorization` (so every request is
// preflighted), whole and streamed, reads an exposed header and a 401; a page from OTHER_PORT, an origin duet does not
// list, is refused by the browser itself. Usage:
//   node browser_cors.mjs DUET_LISTED_URL DUET_ANY_URL KEY PAGE_PORT OTHER_PORT
// DUET_LISTED_URL runs with --cors-origin http://127.0.0.1:PAGE_PORT, DUET_ANY_URL with --cors-origin '*'.
import assert from "node:assert/strict";
import http from "node:http";
import puppeteer from "puppeteer-core";

const [listedUrl, anyUrl, key, pagePort, otherPort] = process.argv.slice(2);
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";

// The page: an empty document; the calls are made from its origin by page.evaluate.
const servePage = (port) => new Promise((resolve) => {
  const server = http.createServer((_, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<!doctype html><title>duet cors</title>");
  });
  server.listen(Number(port), "127.0.0.1", () => resolve(server));
});
const pages = [await servePage(pagePort), await servePage(otherPort)];

// Runs in the page: a whole chat completion, a streamed one read chunk by chunk, and a request with a wrong key.
async function callDuet(duet, key) {
  const body = (extra) => JSON.stringify({ messages: [{ role: "user", content: "Hi" }], max_tokens: 4, ...extra });
  const headers = (k) => ({ authorization: `Bearer ${k}`, "content-type": "application/json" });
  const whole = await fetch(`${duet}/v1/chat/completions`, { method: "POST", headers: headers(key),
    body: body({ x_unknown_field: 1 }) });
  const wholeJson = await whole.json();
  const streamed = await fetch(`${duet}/v1/chat/completions`, { method: "POST", headers: headers(key),
    body: body({ stream: true }) });
  const reader = streamed.body.getReader();
  const decoder = new TextDecoder();
  let events = "", reads = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    reads++;
    events += decoder.decode(value, { stream: true });
  }
  const refused = await fetch(`${duet}/v1/models`, { headers: { authorization: "Bearer wrong" } });
  return { status: whole.status, object: wholeJson.object, ignored: whole.headers.get("x-duet-ignored-fields"),
    streamStatus: streamed.status, events, reads, refusedStatus: refused.status,
    refusedCode: (await refused.json()).error.code };
}

const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu"] });
try {
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${pagePort}/`);
  for (const duet of [listedUrl, anyUrl]) {
    const got = await page.evaluate(callDuet, duet, key);
    assert.equal(got.status, 200, duet);
    assert.equal(got.object, "chat.completion");
    assert.equal(got.ignored, "x_unknown_field", "an exposed header is readable");
    assert.equal(got.streamStatus, 200);
    assert.ok(got.events.trimEnd().endsWith("data: [DONE]"), got.events);
    assert.ok(got.events.includes("chat.completion.chunk"));
    assert.equal(got.refusedStatus, 401);
    assert.equal(got.refusedCode, "invalid_api_key");
  }
  // Another origin: the listed server's preflight refuses it, and the browser never sends the request.
  const other = await browser.newPage();
  await other.goto(`http://127.0.0.1:${otherPort}/`);
  const blocked = await other.evaluate(async (duet, key) => {
    try {
      await fetch(`${duet}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
      return "fetched";
    } catch (e) {
      return e.name;
    }
  }, listedUrl, key);
  assert.equal(blocked, "TypeError");
  // `*` lets that origin in too.
  const allowed = await other.evaluate(async (duet, key) =>
    (await fetch(`${duet}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status, anyUrl, key);
  assert.equal(allowed, 200);
} finally {
  await browser.close();
  for (const server of pages) server.close();
}
console.log("browser cors: ok");
