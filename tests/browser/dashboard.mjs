// Opens the dashboard of a running `rally demo` in headless Chromium and checks what a
// newcomer would look at: the figures change, the table is drawn with its entities, the
// latency histogram has samples, every tick phase has a bar. Saves a screenshot.
// Usage: node dashboard.mjs URL SCREENSHOT.png   (CHROMIUM: the browser; see page.mjs)
import { checkPage } from "./page.mjs";

await checkPage("dashboard", async (page, url, check) => {
  // The first figures: the page has applied a view and the host's first second is in.
  await page.waitForFunction(() => Number(document.body.dataset.updates || 0) >= 3, null, { timeout: 30000 });
  await page.waitForSelector("#phases .phase", { timeout: 30000 });
  const read = () => page.evaluate(() => ({
    updates: Number(document.body.dataset.updates),
    summary: document.getElementById("summary").textContent,
    entities: Number(document.getElementById("sandbox").dataset.entities),
    phases: document.querySelectorAll("#phases .phase").length,
    latency: document.getElementById("latency-figures").textContent,
    players: document.querySelectorAll("#clients tbody tr").length,
  }));
  const first = await read();
  const started = Date.now();
  await page.waitForTimeout(2000);
  const second = await read();
  const seconds = (Date.now() - started) / 1000;
  const rate = (second.updates - first.updates) / seconds;
  check(second.updates > first.updates, `the figures update (${second.updates - first.updates} updates in ${seconds.toFixed(1)} s: ${rate.toFixed(1)} per second)`);
  check(second.summary !== first.summary, `the summary line changes ("${second.summary}")`);
  check(second.entities >= 6, `the canvas draws the table's entities (${second.entities} drawn)`);
  check(second.phases === 5, `a bar for each tick phase (${second.phases})`);
  check(second.players >= 1, `a row for each player (${second.players})`);
  check(/mean\d/.test(second.latency.replace(/\s/g, "")), `latency figures shown (${second.latency})`);
  // The browser's gateways are listed with their counters (the demo runs both).
  const gateways = await page.evaluate(() => document.getElementById("host-figures").textContent);
  check(/browser gateway \(websocket\)\d+ \/ \d+ sessions/.test(gateways) && gateways.includes("(webtransport)"),
    `the browser gateways' counters shown (${(gateways.match(/browser gateway.*?bad input \d+/g) || []).join("; ")})`);
  // The canvas really has drawn: the table's blue covers a good share of its pixels.
  const tablePixels = await page.evaluate(() => {
    const c = document.getElementById("sandbox");
    const data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let blue = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i] === 0x1d && data[i + 1] === 0x4e && data[i + 2] === 0x89) blue += 1;
    }
    return blue / (c.width * c.height);
  });
  check(tablePixels > 0.2, `the table is painted (${(tablePixels * 100).toFixed(0)}% of the canvas)`);
  const live = await (await page.request.get(new URL("/api/live", url).href)).json();
  console.log(`measured: ${rate.toFixed(1)} updates/s, dashboard ${live.dashboard_cpu_percent.toFixed(2)}% of a core, ` +
    `host ${live.host_cpu_percent.toFixed(1)}% of a core, latency mean ${live.latency.mean_ms.toFixed(1)} ms ` +
    `(model ${live.latency.best_ms.toFixed(1)} to ${live.latency.worst_ms.toFixed(1)}), ${live.latency.within_percent.toFixed(0)}% within`);
});
