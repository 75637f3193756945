// The independent validator: ajv (draft 2020-12) with ajv-formats in full mode. Reads a JSON file of cases
// [{schema, doc_base64}] (the document's raw bytes, so invalid UTF-8 is caught by a fatal decoder instead of being
// repaired on read) and prints one JSON array of {valid, error} in the same order.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv, { mode: "full" });
const decoder = new TextDecoder("utf-8", { fatal: true });
const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const compiled = new Map();
const results = cases.map(({ schema, doc_base64 }) => {
  let text;
  try {
    text = decoder.decode(Buffer.from(doc_base64, "base64"));
  } catch (e) {
    return { valid: false, error: "invalid UTF-8" };
  }
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { valid: false, error: "not JSON: " + e.message };
  }
  const key = JSON.stringify(schema);
  if (!compiled.has(key)) {
    const copy = typeof schema === "object" && schema !== null ? { ...schema } : schema;
    if (copy && copy.$schema) delete copy.$schema;  // draft-07 documents validate the same for this subset
    compiled.set(key, ajv.compile(copy));
  }
  const validate = compiled.get(key);
  const valid = validate(value);
  return { valid, error: valid ? "" : ajv.errorsText(validate.errors) };
});
process.stdout.write(JSON.stringify(results));
