// Trains a byte-level BPE tokenizer.json with Hugging Face's own tokenizers library (npm "tokenizers", the Rust
// trainer behind the Python one) on a model's training texts, as GPT-2's is built: GPT-2's pre-split (ByteLevel,
// no prefix space), no normaliser, "<|endoftext|>" as the one special token (the end and padding of a text).
// Used for e2e-mdlm (scripts/train_e2e_tokenizer.sh); any JSON Lines of {"prompt", "answer"} texts will do.
//
// usage: node train_bpe_tokenizer.mjs NPM_DIR TEXTS.jsonl OUT.json VOCAB_SIZE
//   NPM_DIR: where npm installed tokenizers (node_modules inside); VOCAB_SIZE: tokens in all, "<|endoftext|>"
//   included (the model adds its mask after them).
//
// The trainer's merges are kept in their order up to VOCAB_SIZE: BPE training is greedy, so the first k merges
// are what a run asked for k merges would learn. The vocabulary is then numbered as GPT-2's is: the 256 byte
// symbols first (all of them, seen in the texts or not, so that any text encodes), then each merge's token in rank
// order, then "<|endoftext|>". The file is read back with the same library and must encode every text as the
// trained tokenizer does.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [npmDir, textsFile, outFile, vocabArg] = process.argv.slice(2);
if (!npmDir || !textsFile || !outFile || !vocabArg || process.argv.length !== 6) {
  console.error('usage: node train_bpe_tokenizer.mjs NPM_DIR TEXTS.jsonl OUT.json VOCAB_SIZE');
  process.exit(2);
}
const vocabSize = Number(vocabArg);
if (!Number.isInteger(vocabSize) || vocabSize < 258 || vocabSize > 1 << 20) {
  console.error(`VOCAB_SIZE must be an integer in [258, ${1 << 20}], got ${vocabArg}`);
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(npmDir), 'package.json'));
const { Tokenizer, BPE, byteLevelPreTokenizer, byteLevelAlphabet } = require('tokenizers');
const version = require('tokenizers/package.json').version;
const EOT = '<|endoftext|>';

// Every prompt and answer is a document of its own: the model encodes them apart.
const documents = [];
fs.readFileSync(textsFile, 'utf8').split('\n').forEach((line, i) => {
  if (!line.trim()) return;
  let text;
  try {
    text = JSON.parse(line);
  } catch (e) {
    throw new Error(`${textsFile}:${i + 1}: not JSON (${e.message})`);
  }
  for (const key of ['prompt', 'answer'])
    if (typeof text[key] !== 'string') throw new Error(`${textsFile}:${i + 1}: "${key}" must be a string`);
  if (text.prompt) documents.push(text.prompt);
  documents.push(text.answer);
});
if (documents.length === 0) throw new Error(`${textsFile}: no texts`);

// The trainer reads its files a line at a time, so each line of a document is a training line. Under GPT-2's split a
// lone newline (the prompt format's) is a pre-token of its own and never merges with a neighbour, so splitting there
// changes no merge; its byte symbol is in the alphabet regardless.
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'bpe-train-'));
const corpus = path.join(work, 'corpus.txt');
fs.writeFileSync(corpus, documents.flatMap((d) => d.split('\n')).filter((l) => l.length > 0).join('\n') + '\n');

const trained = new Tokenizer(BPE.empty());
trained.setPreTokenizer(byteLevelPreTokenizer(false, true));
trained.train([corpus]);
const trainedFile = path.join(work, 'trained.json');
trained.save(trainedFile);
const model = JSON.parse(fs.readFileSync(trainedFile, 'utf8')).model;
fs.rmSync(work, { recursive: true, force: true });

const alphabet = byteLevelAlphabet();
if (alphabet.length !== 256) throw new Error(`expected 256 byte symbols, got ${alphabet.length}`);
const vocab = {};
// GPT-2's order of the byte symbols: the printable bytes as themselves first, then the others shifted to 256 and up.
const byteSymbols = [];
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  if (printable) byteSymbols.push(String.fromCodePoint(b));
}
let shifted = 0;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  if (!printable) byteSymbols.push(String.fromCodePoint(256 + shifted++));
}
if (byteSymbols.slice().sort().join('') !== alphabet.slice().sort().join(''))
  throw new Error("the library's byte-level alphabet is not GPT-2's");
byteSymbols.forEach((s, i) => (vocab[s] = i));

const pairs = model.merges.map((m) => (Array.isArray(m) ? m : m.split(' ')));
const keep = Math.min(pairs.length, vocabSize - 256 - 1);
const merges = [];
for (const [left, right] of pairs.slice(0, keep)) {
  if (!(left in vocab) || !(right in vocab)) throw new Error(`merge "${left} ${right}" uses an unknown token`);
  const token = left + right;
  if (!(token in vocab)) vocab[token] = Object.keys(vocab).length;
  merges.push([left, right]);
}
const eotId = Object.keys(vocab).length;

const tokenizerJson = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [
    { id: eotId, content: EOT, single_word: false, lstrip: false, rstrip: false, normalized: true, special: true },
  ],
  normalizer: null,
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: {
    type: 'BPE',
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: '',
    end_of_word_suffix: '',
    fuse_unk: false,
    byte_fallback: false,
    ignore_merges: false,
    vocab,
    merges,
  },
};
fs.mkdirSync(path.dirname(path.resolve(outFile)), { recursive: true });
fs.writeFileSync(outFile, JSON.stringify(tokenizerJson, null, 1) + '\n');

// Read back with the library: every document decodes to itself.
const written = Tokenizer.fromFile(outFile);
if (written.getVocabSize(true) !== eotId + 1) throw new Error('the written vocabulary has another size');
let checked = 0;
for (const d of documents) {
  const mine = await written.encode(d, null, { addSpecialTokens: false });
  if ((await written.decode(mine.getIds(), false)) !== d) throw new Error(`does not decode back: ${JSON.stringify(d)}`);
  checked++;
}
console.log(
  `tokenizers ${version}: ${documents.length} documents, ${pairs.length} merges learned, ${keep} kept; ` +
    `${eotId + 1} tokens (256 bytes, ${keep} merges, ${EOT}) -> ${outFile}; ${checked} documents read back`,
);
