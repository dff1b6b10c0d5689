// A real browser on `dsh workflow serve` for tests/serve.rs: headless
// Chromium driven by playwright-core.
//
// Usage: node browser.mjs PLAYWRIGHT_DIR BASE_URL LIVE_RUN SLOW_RUN SCREENSHOT
// Prints one JSON object: what the pages showed.

import { createRequire } from "node:module";

const [pwDir, base, live, slow, shot] = process.argv.slice(2);
const require = createRequire(pwDir + "/");
const { chromium } = require("playwright-core");

const out = { dialogs: [], errors: [] };
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 520 } });
  page.on("dialog", (d) => { out.dialogs.push(d.message()); d.dismiss(); });
  page.on("pageerror", (e) => out.errors.push(String(e)));

  // The list.
  await page.goto(base + "/");
  await page.waitForSelector(`tr[data-run="${live}"]`, { timeout: 60000 });
  out.listed = await page.$$eval("tr[data-run]", (rows) => rows.map((r) => r.dataset.run));

  // The live run page: a bar that runs, then every bar green, no reload.
  await page.goto(base + "/runs/" + encodeURIComponent(live));
  await page.waitForSelector(".bar.running", { timeout: 60000 });
  out.sawRunning = true;
  out.url = page.url();
  await page.waitForFunction(
    () => document.querySelectorAll(".bar.completed").length === 2,
    null,
    { timeout: 120000 },
  );
  await page.waitForFunction(() => document.getElementById("status").textContent === "completed", null, { timeout: 60000 });
  out.sameUrl = page.url() === out.url;
  out.status = await page.textContent("#status");
  out.labels = await page.$$eval(".label", (ls) => ls.map((l) => l.textContent));
  out.phases = await page.$$eval(".phase", (ps) => ps.map((p) => p.textContent));
  out.logs = await page.$$eval(".log", (ls) => ls.map((l) => l.textContent));
  out.images = await page.$$eval("img", (is) => is.length);
  out.scripts = await page.$$eval("script", (ss) => ss.length);
  await page.screenshot({ path: shot });

  // Cancel from the page.
  await page.goto(base + "/runs/" + encodeURIComponent(slow));
  await page.waitForSelector(".bar.running", { timeout: 60000 });
  await page.click("#cancel");
  await page.waitForFunction(() => document.getElementById("status").textContent === "cancelled", null, { timeout: 60000 });
  out.cancelled = await page.textContent("#status");
  out.cancelBars = await page.$$eval(".bar", (bs) => bs.map((b) => b.className));
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
