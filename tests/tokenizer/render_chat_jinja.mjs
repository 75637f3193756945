// Renders every case of a chat-cases file with @huggingface/jinja (an independent Jinja engine) and prints
// a JSON list of {name, text} or {name, error}. Usage: node render_chat_jinja.mjs TEMPLATE CASES
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [template, cases] = process.argv.slice(2).map((p) => readFileSync(p, "utf8"));
const compiled = new Template(template);
const out = JSON.parse(cases).map((c) => {
  try {
    const text = compiled.render({
      messages: c.messages,
      tools: c.tools ?? null,
      add_generation_prompt: c.add_generation_prompt ?? true,
      enable_thinking: c.enable_thinking ?? true,
    });  // raise_exception is built into @huggingface/jinja
    return { name: c.name, text };
  } catch (e) {
    return { name: c.name, error: String(e.message ?? e) };
  }
});
process.stdout.write(JSON.stringify(out));
