// Opens the dashboard of a running `rally demo --scene FILE` in headless Chromium and checks
// that the scene is drawn from above: its static geometry was read from /api/scene, the
// canvas counts the scene's bodies, and the page raised no script error. Saves a screenshot.
// Usage: node scene.mjs URL SCREENSHOT.png   (CHROMIUM: the browser; see page.mjs)
import { checkPage } from "./page.mjs";

await checkPage("scene", async (page, url, check) => {
  await page.waitForFunction(() => Number(document.body.dataset.updates || 0) >= 10, null, { timeout: 30000 });
  const scene = await (await page.request.get(new URL("/api/scene", url).href)).json();
  const bodies = scene.pieces.filter((p) => p.kind !== "collider").length;
  const seen = await page.evaluate(() => ({
    title: document.getElementById("view-title").textContent,
    entities: Number(document.getElementById("sandbox").dataset.entities),
  }));
  check(seen.title.includes(scene.file), `the card names the scene ("${seen.title}")`);
  check(seen.entities >= bodies, `the canvas draws the scene's ${bodies} bodies (${seen.entities} drawn)`);
});
