// The texts both tokenizer comparisons encode (bpe_reference.mjs, wordpiece_reference.mjs), each {source, bytes}: the
// E2E dev references, the UD English EWT dev sentences, files of awkward lines, one paragraph and long pieces.
import fs from "fs";
import path from "path";
import zlib from "zlib";

export function e2eRefs(file) {
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

export function conlluTexts(file) {
  const lines = zlib.gunzipSync(fs.readFileSync(file)).toString("utf8").split("\n");
  const texts = [];
  lines.forEach((line, i) => {
    if (line.startsWith("# text = ")) texts.push({ source: `ewt_dev:${i + 1}`, bytes: Buffer.from(line.slice(9), "utf8") });
  });
  return texts;
}

// One text a line, sources named `${name}:${line}`. Escapes: \n \t \r \\ \xHH (one byte, so invalid UTF-8 can be
// written) and \u{H..} (a code point); lines starting with # are comments.
export function awkwardTexts(file, name = "awkward") {
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
    texts.push({ source: `${name}:${i + 1}`, bytes: Buffer.from(bytes) });
  });
  return texts;
}

// The BPE comparison's corpus, which the WordPiece one starts from.
export function corpus(repoDir) {
  const e2e = e2eRefs(path.join(repoDir, "data/e2e_nlg/devset.csv.gz"));
  return [
    ...e2e,
    ...conlluTexts(path.join(repoDir, "data/ud_english_ewt/en_ewt-ud-dev.conllu.gz")),
    ...awkwardTexts(path.join(repoDir, "tests/text/bpe_awkward.txt")),
    // Whole paragraphs: the whitespace rules across line breaks.
    { source: "e2e_dev:paragraph", bytes: Buffer.concat(e2e.slice(0, 60).map((t) => Buffer.concat([t.bytes, Buffer.from("\n \n\t")]))) },
    // Long pieces, beyond the cache, and many merges in one piece.
    ...[["a", 5000], ["一", 3000], ["abab", 1500], [" ", 3000], ["😀", 1000], ["9", 4000], ["\n\n ", 1000], ["ab1 ", 2000]]
      .map(([unit, n]) => ({ source: `long:${JSON.stringify(unit)}x${n}`, bytes: Buffer.from(unit.repeat(n), "utf8") })),
  ];
}
