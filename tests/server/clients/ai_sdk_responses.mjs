// The Vercel AI SDK's default OpenAI provider, which speaks the Responses API (/v1/responses): text, streaming,
// tools and an abort. Usage: node ai_sdk_responses.mjs URL API_KEY
import { checkAiSdk } from "./ai_sdk_checks.mjs";

await checkAiSdk(process.argv[2], process.argv[3], (provider) => provider("demo"));
console.log("ai sdk responses: ok");
