// The playground in a real browser: starts `rudder serve` on loopback, opens its page in headless Chromium driven by
// playwright-core, generates with two controls (length and span), checks that streamed steps appear and that every
// sample's verdicts render, and saves a screenshot. Exits 77 (skipped), saying why, without Chromium or
// playwright-core.
//
//   node playground_test.mjs RUDDER NPM_DIR SCREENSHOT
import { spawn, execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [rudder, npmDir, screenshot] = process.argv.slice(2);
const skip = (why) => {
  console.log("SKIP: " + why);
  process.exit(77);
};
const fail = (why) => {
  console.error("FAIL: " + why);
  process.exitCode = 1;
  throw new Error(why);
};

function findChromium() {
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    try {
      return execFileSync("sh", ["-c", "command -v " + name], { encoding: "utf8" }).trim();
    } catch {
      // not this one
    }
  }
  return null;
}

const chromiumPath = process.env.RUDDER_CHROMIUM || findChromium();
if (!chromiumPath) skip("no Chromium (Debian's chromium package; make test installs it, or set RUDDER_CHROMIUM)");
const modulePath = path.join(npmDir, "node_modules", "playwright-core");
if (!existsSync(modulePath)) skip("playwright-core is not installed in " + npmDir + " (the serve.playground.fetch fixture installs it from npm)");
const { chromium } = createRequire(path.join(npmDir, "package.json"))("playwright-core");

// The server on a free port, read from its first line on stderr.
const server = spawn(rudder, ["serve", "--port", "0", "--threads", "1"], { stdio: ["ignore", "ignore", "pipe"] });
const port = await new Promise((resolve, reject) => {
  let text = "";
  server.stderr.on("data", (chunk) => {
    text += chunk;
    const m = text.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) resolve(Number(m[1]));
  });
  server.on("exit", (code) => reject(new Error("rudder serve exited (" + code + "): " + text)));
});

let browser;
try {
  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox", "--disable-gpu"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const consoleErrors = [];
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(`http://127.0.0.1:${port}/`);
  await page.waitForSelector("body[data-state=ready]", { timeout: 30000 });

  // The models offered are the generators, the default one selected; no classifier or judge among them.
  const offered = await page.$$eval("#model option", (options) => options.map((o) => o.value));
  for (const other of ["e2e-sentiment-judge", "e2e-teacher", "ewt-tagger", "gum-parser", "e2e-discrete-syntax"])
    if (offered.includes(other)) throw new Error(`the playground offers ${other}: ${offered}`);
  if (!offered.includes("e2e-continuous")) throw new Error(`e2e-continuous not offered: ${offered}`);
  const selected = await page.$eval("#model", (s) => s.value);
  if (selected !== "e2e-discrete") throw new Error(`the default model is not selected: ${selected}`);

  // Compose: the discrete model, 40 steps, 3 samples, a length of 9 tokens and the prefix "The Eagle".
  await page.selectOption("#model", "e2e-discrete");
  await page.fill("#steps", "40");
  await page.fill("#samples", "3");
  await page.check("#use-length");
  await page.fill("fieldset[data-plugin=length] [data-param=tokens]", "9");
  await page.check("#use-span");
  await page.fill("fieldset[data-plugin=span] [data-param=prefix]", "The Eagle");
  await page.click("#generate");

  await page.waitForSelector("body[data-state=done], body[data-state=error]", { timeout: 120000 });
  const state = await page.getAttribute("body", "data-state");
  if (state !== "done") fail("the run ended in '" + state + "': " + (await page.textContent("#error")));
  const steps = Number(await page.getAttribute("body", "data-steps"));
  if (steps < 2) fail("only " + steps + " streamed steps reached the page");
  const samples = await page.$$eval("#outputs li", (items) => items.map((li) => ({
    final: li.dataset.final === "true",
    text: li.querySelector(".text").textContent.trim(),
    verdicts: [...li.querySelectorAll(".verdict")].map((b) => ({ control: b.dataset.control, satisfied: b.classList.contains("satisfied") })),
  })));
  if (samples.length !== 3) fail("expected 3 samples on the page, found " + samples.length);
  for (const s of samples) {
    if (!s.final) fail("a sample has no final verdicts: " + JSON.stringify(s));
    const controls = s.verdicts.map((v) => v.control).sort().join(",");
    if (controls !== "length,span") fail("verdicts of " + controls + " instead of length,span: " + JSON.stringify(s));
    if (!s.verdicts.every((v) => v.satisfied)) fail("a hard constraint is shown unsatisfied: " + JSON.stringify(s));
    if (!s.text.startsWith("The Eagle") || s.text.split(/\s+/).length < 2) fail("text without its prefix: " + s.text);
  }
  await page.screenshot({ path: screenshot, fullPage: true });
  if (consoleErrors.length) fail("the page logged errors: " + consoleErrors.join("; "));
  console.log(`ok: ${steps} streamed steps, ${samples.length} samples with verdicts; screenshot ${screenshot}`);
} finally {
  if (browser) await browser.close();
  server.kill("SIGTERM");
}
