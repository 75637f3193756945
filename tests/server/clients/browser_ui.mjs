// The page GET / answers, in Debian's chromium (headless, puppeteer-core): a chat message whose streamed reply equals
// what the official openai client gets for the same request; the stop button; the decisions tab, whose bars equal
// POST /v1/systemone's probabilities for the same question. Usage: node browser_ui.mjs URL API_KEY [SCREENSHOT]
import assert from "node:assert/strict";
import OpenAI from "openai";
import puppeteer from "puppeteer-core";

const [url, key, screenshot] = process.argv.slice(2);
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });

const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu"] });
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1000, height: 700 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${url}/`);
  const set = (selector, value) => page.$eval(selector, (el, v) => { el.value = v; }, value);
  await set("#key", key);
  await set("#temperature", "0");
  await set("#max-tokens", "8");
  await page.$eval("#thinking", (el) => { el.checked = false; });

  // A message: the streamed reply equals the openai client's greedy answer to the same request.
  await page.type("#prompt", "Say hello.");
  await page.click("#send");
  await page.waitForSelector(".turn.assistant[data-done=true]");
  const shown = await page.$eval(".turn.assistant .content", (el) => el.textContent);
  const reference = await client.chat.completions.create({ model: "demo", temperature: 0, max_tokens: 8,
    messages: [{ role: "user", content: "Say hello." }], chat_template_kwargs: { enable_thinking: false } });
  assert.equal(shown, reference.choices[0].message.content ?? "");
  assert.equal(await page.$eval("#chat-error", (el) => el.textContent), "");

  // Thinking on: the reasoning is shown folded.
  await page.$eval("#thinking", (el) => { el.checked = true; });
  await page.type("#prompt", "Why?");
  await page.click("#send");
  await page.waitForSelector(".turn.assistant:nth-of-type(4)[data-done=true]");
  const folded = await page.$eval(".turn.assistant:nth-of-type(4) details.reasoning",
    (el) => ({ hidden: el.hidden, open: el.open, text: el.textContent }));
  assert.ok(!folded.hidden && !folded.open && folded.text.length > "Reasoning".length, JSON.stringify(folded));

  // Stop: a long reply is cut by the button, and the page is ready for the next message.
  await set("#max-tokens", "2000");
  await page.type("#prompt", "Tell a long story.");
  await page.click("#send");
  // The reply may end (the model's end of text) before the wait sees the button enabled, on a loaded machine even
  // between two frames: a wait for the button alone then never ended (a CI run timed out so). So wait for either,
  // on every change of the page, and stop the reply if it is still running.
  await page.waitForFunction(() => !document.querySelector("#stop").disabled ||
    document.querySelector(".turn.assistant:nth-of-type(6)[data-done=true]") !== null, { polling: "mutation" });
  if (!(await page.$eval("#stop", (el) => el.disabled))) await page.click("#stop");
  else console.log("browser ui: the long reply ended before Stop could be pressed");
  await page.waitForSelector(".turn.assistant:nth-of-type(6)[data-done=true]");
  assert.equal(await page.$eval("#send", (el) => el.disabled), false);
  assert.equal(await page.$eval("#chat-error", (el) => el.textContent), "");
  if (screenshot) await page.screenshot({ path: `${screenshot}-chat.png` });

  // Decisions: the bars are the API's probabilities for the same question.
  await page.click("#tab-decide");
  const state = await page.$eval("#state", (el) => el.value);
  await page.select("#question-type", "choice");
  await set("#question-id", "team");
  await set("#instructions", "Which team?");
  await set("#options", "billing, tech, sales");
  await page.click("#ask");
  await page.waitForSelector("#answer .bar");
  const shownBars = await page.$$eval("#answer .bar", (rows) => rows.map((r) => [r.dataset.name, Number(r.dataset.p)]));
  const api = await fetch(`${url}/v1/systemone`, { method: "POST", headers: { authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: "demo", state, questions: { team: { type: "choice", instructions: "Which team?",
      criteria: { billing: null, tech: null, sales: null } } } }) });
  assert.equal(api.status, 200);
  assert.deepEqual(shownBars, Object.entries((await api.json()).answers.team.probabilities));
  if (screenshot) await page.screenshot({ path: `${screenshot}-decisions.png` });
  assert.deepEqual(errors, []);
} finally {
  await browser.close();
}
console.log("browser ui: ok");
