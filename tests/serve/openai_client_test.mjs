// serve.openai: OpenAI's official JavaScript client (npm "openai") against `rudder serve`: model listing, completions
// and chat completions, streaming, n, seed, stop, usage, response_format and errors, on a bundled model (plain chat
// format) and on LLaDA- and Dream-shaped checkpoints whose chat templates are their real tokenizer_config.json files
// (the prompt the server renders must be the one Hugging Face's renderer, @huggingface/jinja, renders).
// Usage: node openai_client_test.mjs RUDDER OPENAI_NODE_MODULES JINJA_NODE_MODULES CHECKPOINTS_DIR MODELS_DIR
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [rudder, openaiModules, jinjaModules, checkpoints, models] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(path.join(openaiModules, "openai/index.mjs")).href);
const { Template } = await import(pathToFileURL(path.join(jinjaModules, "@huggingface/jinja/dist/index.js")).href);

const server = spawn(rudder, ["serve", "--port", "0", "--threads", "1", "--models", checkpoints, "--models", models],
                     { stdio: ["ignore", "ignore", "pipe"] });
let log = "";
const port = await new Promise((resolve, reject) => {
  server.stderr.on("data", (d) => {
    log += d;
    const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) resolve(Number(m[1]));
  });
  server.on("exit", (code) => reject(new Error(`rudder serve exited (${code}): ${log}`)));
});
// A long timeout: under the sanitizers the structured answer over Qwen2.5's 151,936 tokens takes minutes.
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0, timeout: 540000 });
let checks = 0;
const ok = (what) => { checks++; console.log("ok " + what); };

try {
  // Models, in OpenAI's shape.
  const listed = (await client.models.list()).data.map((m) => m.id);
  for (const name of ["e2e-discrete", "llada_llama3", "dream_qwen"]) assert.ok(listed.includes(name), listed.join(","));
  for (const name of ["e2e-sentiment-judge", "ewt-tagger"]) assert.ok(!listed.includes(name), `${name} listed`);
  assert.equal((await client.models.retrieve("dream_qwen")).id, "dream_qwen");
  await assert.rejects(client.models.retrieve("no-such-model"), (e) => e.status === 404);
  ok("models.list and models.retrieve");

  // Completions: n samples of one prompt, the same again with the same seed, usage counted.
  const ask = { model: "e2e-discrete", prompt: "The Eagle is", max_tokens: 16, n: 3, seed: 7, temperature: 0.8 };
  const first = await client.completions.create(ask);
  assert.equal(first.object, "text_completion");
  assert.equal(first.choices.length, 3);
  assert.deepEqual(first.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of first.choices) {
    assert.ok(c.text.trim().length > 0, JSON.stringify(c));
    assert.ok(["stop", "length"].includes(c.finish_reason));
  }
  assert.equal(first.usage.prompt_tokens, 3);
  assert.equal(first.usage.total_tokens, first.usage.prompt_tokens + first.usage.completion_tokens);
  const again = await client.completions.create(ask);
  assert.deepEqual(again.choices.map((c) => c.text), first.choices.map((c) => c.text));
  ok("completions: n, seed, usage");

  // Streamed: the same texts, chunk by chunk, the usage last, and the stream ends at [DONE].
  const streamed = ["", "", ""];
  let usage = null, finishes = 0;
  for await (const chunk of await client.completions.create({ ...ask, stream: true,
                                                               stream_options: { include_usage: true } })) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      streamed[c.index] += c.text;
      if (c.finish_reason) finishes++;
    }
  }
  assert.deepEqual(streamed, first.choices.map((c) => c.text));
  assert.equal(finishes, 3);
  assert.deepEqual(usage, first.usage);
  ok("completions streamed");

  // A stop sequence ends the text before it.
  const stopped = await client.completions.create({ ...ask, n: 4, stop: ["."], max_tokens: 24 });
  for (const c of stopped.choices) assert.ok(!c.text.includes("."), c.text);
  assert.ok(stopped.choices.some((c) => c.finish_reason === "stop"));
  ok("completions: stop");

  // Chat on a model without a template: the plain format (the contents joined), answered as the assistant.
  const plain = await client.chat.completions.create({
    model: "e2e-discrete", max_tokens: 16, seed: 3, temperature: 0,
    messages: [{ role: "system", content: "The Eagle" }, { role: "user", content: "is a" }] });
  assert.equal(plain.object, "chat.completion");
  assert.equal(plain.choices[0].message.role, "assistant");
  assert.ok(plain.choices[0].message.content.trim().length > 0);
  assert.equal(plain.rudder.prompt, "The Eagle is a");
  ok("chat, plain format");

  // Chat with the real templates: the prompt is Hugging Face's rendering of the model's own template.
  const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Name a pub." },
                    { role: "assistant", content: "The Eagle." }, { role: "user", content: "Another?" }];
  for (const name of ["llada_llama3", "dream_qwen"]) {
    const config = JSON.parse(fs.readFileSync(path.join(checkpoints, name, "tokenizer_config.json"), "utf8"));
    const special = {};
    for (const key of ["bos_token", "eos_token", "pad_token", "unk_token"])
      if (typeof config[key] === "string") special[key] = config[key];
    const expected = new Template(config.chat_template).render({ ...special, messages, add_generation_prompt: true });
    const answer = await client.chat.completions.create({ model: name, messages, max_tokens: 12, seed: 5 });
    assert.equal(answer.rudder.prompt, expected);
    assert.ok(answer.usage.prompt_tokens > 10);
    assert.ok(answer.usage.completion_tokens <= 12);
    let text = "", role = null;
    for await (const chunk of await client.chat.completions.create({ model: name, messages, max_tokens: 12, seed: 5,
                                                                      stream: true })) {
      for (const c of chunk.choices) {
        if (c.delta.role) role = c.delta.role;
        text += c.delta.content ?? "";
      }
    }
    assert.equal(role, "assistant");
    assert.equal(text, answer.choices[0].message.content);
    ok(`chat with ${name}'s own template, and streamed`);
  }

  // response_format: the answer is JSON valid against the schema, whatever the random weights would write, with its
  // properties in the schema's order (as OpenAI's structured outputs write them; here not the alphabetical one).
  const schema = { type: "object", properties: { stars: { type: "integer", minimum: 1, maximum: 5 },
                   name: { type: "string", maxLength: 12 } }, required: ["stars", "name"], additionalProperties: false };
  const formatted = await client.chat.completions.create({
    model: "dream_qwen", messages: [{ role: "user", content: "A pub as JSON." }], max_tokens: 32, seed: 2, n: 2,
    response_format: { type: "json_schema", json_schema: { name: "pub", schema, strict: true } } });
  for (const c of formatted.choices) {
    const record = JSON.parse(c.message.content);
    assert.deepEqual(Object.keys(record), ["stars", "name"], c.message.content);
    assert.equal(typeof record.name, "string");
    assert.ok(Number.isInteger(record.stars) && record.stars >= 1 && record.stars <= 5, c.message.content);
  }
  ok("response_format json_schema");

  // Errors as OpenAI's: the client's error classes, the field at fault in `param`.
  await assert.rejects(client.completions.create({ model: "no-such-model", prompt: "x" }),
                       (e) => e.status === 404 && e.code === "model_not_found");
  await assert.rejects(client.completions.create({ model: "e2e-discrete", prompt: "The Eagle", temperature: 5 }),
                       (e) => e.status === 400 && e.param === "temperature");
  await assert.rejects(client.chat.completions.create({ model: "e2e-discrete", messages: [] }),
                       (e) => e.status === 400 && e.param === "messages");
  await assert.rejects(client.completions.create({ model: "e2e-discrete", prompt: "The Eagle", max_tokens: 400 }),
                       (e) => e.status === 400 && e.param === "max_tokens" && /at most 48 positions/.test(e.message) &&
                              /prompt's 2 tokens and max_tokens 400/.test(e.message));
  await assert.rejects(client.completions.create({ model: "e2e-discrete", prompt: "x", logit_bias: { 5: 2 } }),
                       (e) => e.status === 400 && e.param === "logit_bias");
  ok("errors");
  console.log(`${checks} checks passed`);
} finally {
  server.kill("SIGTERM");
}
