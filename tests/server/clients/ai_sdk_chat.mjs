// The Vercel AI SDK (`ai` with `@ai-sdk/openai`'s chat provider, /v1/chat/completions) against duet: text,
// streaming, tools and an abort. Usage: node ai_sdk_chat.mjs URL API_KEY
import { checkAiSdk } from "./ai_sdk_checks.mjs";

await checkAiSdk(process.argv[2], process.argv[3], (provider) => provider.chat("demo"));
console.log("ai sdk chat: ok");
