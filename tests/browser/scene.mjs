// Opens the dashboard of a running `rally demo --scene FILE` in headless Chromium and checks
// that the scene is drawn from above: its static geometry was read from /api/scene, the
// canvas counts the scene's bodies, and the page raised no script error. Saves a screenshot.
// Usage: node scene.mjs URL SCREENSHOT.png   (CHROMIUM: the browser, default /usr/bin/chromium)
import { chromium } from "playwright-core";

const [url, screenshot] = process.argv.slice(2);
if (!url || !screenshot) {
  console.error("usage: node scene.mjs URL SCREENSHOT.png");
  process.exit(2);
}
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const failures = [];
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures.push(what);
};

const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => Number(document.body.dataset.updates || 0) >= 10, null, { timeout: 30000 });
  const scene = await (await page.request.get(new URL("/api/scene", url).href)).json();
  const bodies = scene.pieces.filter((p) => p.kind !== "collider").length;
  const seen = await page.evaluate(() => ({
    title: document.getElementById("view-title").textContent,
    entities: Number(document.getElementById("sandbox").dataset.entities),
  }));
  check(seen.title.includes(scene.file), `the card names the scene ("${seen.title}")`);
  check(seen.entities >= bodies, `the canvas draws the scene's ${bodies} bodies (${seen.entities} drawn)`);
  check(errors.length === 0, `no script errors${errors.length ? ": " + errors.join("; ") : ""}`);
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`screenshot: ${screenshot}`);
} finally {
  await browser.close();
}
if (failures.length) {
  console.error(`scene dashboard test failed: ${failures.join("; ")}`);
  process.exit(1);
}
