// What both dashboard checks share: argument parsing, a headless Chromium on one page that
// records script errors, a check list that prints as it goes, the screenshot, and the exit
// status. `inspect(page, url, check, errors)` does the test's own checks.
// CHROMIUM names the browser (default /usr/bin/chromium).
import { chromium } from "playwright-core";

export async function checkPage(name, inspect) {
  const [url, screenshot] = process.argv.slice(2);
  if (!url || !screenshot) {
    console.error(`usage: node ${name}.mjs URL SCREENSHOT.png`);
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
    await inspect(page, url, check);
    check(errors.length === 0, `no script errors${errors.length ? ": " + errors.join("; ") : ""}`);
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log(`screenshot: ${screenshot}`);
  } finally {
    await browser.close();
  }
  if (failures.length) {
    console.error(`${name} test failed: ${failures.join("; ")}`);
    process.exit(1);
  }
}
