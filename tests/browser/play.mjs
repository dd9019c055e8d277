// The browser player's test: `rally demo` serves /play; headless Chromium loads Rally's wasm
// client, gets a connect token, joins the room over WebTransport (then again, with
// `?transport=ws`, over the WebSocket gateway, and once more with a certificate hash the page
// cannot trust, where it must fall back and say so), draws the table in 3D (three.js on
// WebGL), and scripted mouse moves put its hand at two places over the table; the server's
// side (the dashboard's /api/live, the replicated state of another player) must show the hand
// where the mouse put it. A page given a bad token must say so. Prints the page's own figures:
// RTT, loss, the latency meter against its model, and the page's CPU per frame.
// Usage: node play.mjs DASHBOARD_URL SCREENSHOT.png   (PLAY_QUERY, PLAY_SECONDS: see below)
import { checkPage } from "./page.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Where on the screen the point over the table at (x, z) is, by the page's own camera.
const screenPoint = (page, x, z) => page.evaluate(([x, z]) => window.rallyPlay.screenOf(x, z), [x, z]);

// The share of the 3D view's pixels, as the screen shows them, that are the table's blue.
async function tableShare(page) {
  const png = (await page.locator("#view").screenshot()).toString("base64");
  return page.evaluate(async (png) => {
    const image = new Image();
    image.src = `data:image/png;base64,${png}`;
    await image.decode();
    const copy = Object.assign(document.createElement("canvas"), { width: 128, height: 96 });
    const g = copy.getContext("2d");
    g.drawImage(image, 0, 0, 128, 96);
    const px = g.getImageData(0, 0, 128, 96).data;
    let blue = 0;
    for (let i = 0; i < px.length; i += 4) if (px[i + 2] > 100 && px[i + 2] > px[i] + 60) blue++;
    return blue / (128 * 96);
  }, png);
}

// The hand of `client` as the server's state shows it, waited for until it is near (x, z).
async function handNear(url, client, x, z) {
  let hand = null;
  for (let i = 0; i < 50; i++) {
    const live = await (await fetch(new URL("api/live", url))).json();
    hand = live.sandbox.entities.find((e) => e.role === "hand" && e.player === client);
    if (hand && Math.abs(hand.position[0] - x) < 0.05 && Math.abs(hand.position[2] - z) < 0.05) {
      return hand;
    }
    await sleep(200);
  }
  return hand;
}

// One visit: the page at `query`, which must join over `transport`, and the checks above.
async function play(page, url, check, query, transport) {
  // PLAY_QUERY adds to each visit's address (`worker=0`, `present=drawn`: docs/web.md).
  const extra = process.env.PLAY_QUERY;
  if (extra) query += `${query ? "&" : "?"}${extra}`;
  await page.goto(new URL(`play${query}`, url).href);
  const joined = await page
    .waitForFunction(() => window.rallyPlay && window.rallyPlay.phase === "joined", null, { timeout: 15000 })
    .then(() => true, () => false);
  const phase = await page.evaluate(() => window.rallyPlay.phase);
  check(joined, `the page joined the room (${phase})`);
  const used = await page.evaluate(() => [window.rallyPlay.transport, window.rallyPlay.transportWhy,
    window.rallyPlay.worker, window.rallyPlay.ring]);
  check(used[0] === transport, `the page used ${transport} (it used ${used[0]}${used[1] ? `: ${used[1]}` : ""}` +
    `${used[2] ? ", in a worker" : ", on the main thread"}${used[3] ? ", through the shared ring" : ""})`);
  // The demo serves the page cross-origin isolated, so a worker's datagrams take the ring.
  if (used[2] && !/ring=0/.test(query)) {
    check(used[3], "the worker hands datagrams over through the shared ring (the page is cross-origin isolated)");
  }
  const client = await page.evaluate(() => window.rallyPlay.client);
  await sleep(500);
  const share = await tableShare(page);
  check(share > 0.05, `the 3D view draws the table (${(share * 100).toFixed(0)}% of its pixels)`);
  for (const [x, z] of [[-0.5, 1.0], [0.5, 1.4]]) {
    const [sx, sy] = await screenPoint(page, x, z);
    await page.mouse.move(sx, sy, { steps: 5 });
    const hand = await handNear(url, client, x, z);
    const at = hand ? hand.position.map((v) => v.toFixed(2)).join(", ") : "nowhere";
    check(hand && Math.abs(hand.position[0] - x) < 0.05 && Math.abs(hand.position[2] - z) < 0.05,
      `the server shows player ${client}'s hand at (${x}, ${z}) where the mouse put it (at ${at})`);
  }
  // PLAY_SECONDS: how long the page plays before its figures are read (more samples).
  await sleep(1000 * Number(process.env.PLAY_SECONDS || 2));
  const s = await page.evaluate(() => {
    const cpu = [...window.rallyPlay.cpuMs].sort((a, b) => a - b);
    const q = (p) => cpu[Math.min(cpu.length - 1, Math.floor(p * cpu.length))];
    const session = [...window.rallyPlay.sessionMs].sort((a, b) => a - b);
    return { sessionP50: session[Math.floor(0.5 * session.length)],
      sessionP99: session[Math.min(session.length - 1, Math.floor(0.99 * session.length))],
      firstFrameMs: window.rallyPlay.firstFrameMs, f: window.rallyPlay.figures, frames: window.rallyPlay.frames, p50: q(0.5), p99: q(0.99),
      max: cpu[cpu.length - 1], mean: cpu.reduce((a, b) => a + b, 0) / cpu.length,
      frameMs: window.rallyPlay.frameMs };
  });
  check(s.f.samples > 0 && s.f.rtt_ms > 0, `the meter measured ${s.f.samples} samples, RTT ${s.f.rtt_ms.toFixed(2)} ms`);
  console.log(`${transport}: page figures: RTT ${s.f.rtt_ms.toFixed(2)} ms, loss ${(s.f.loss * 100).toFixed(1)}%, ` +
    `latency mean ${s.f.mean_ms.toFixed(1)} p99 ${s.f.p99_ms.toFixed(1)} ms, model ${s.f.best_ms.toFixed(1)} ` +
    `to ${s.f.worst_ms.toFixed(1)} ms, ${(s.f.within * 100).toFixed(0)}% within, ` +
    `${(s.f.at_best * 100).toFixed(0)}% at most best + 1 ms (on the page's frames; ` +
    `${(s.f.within_steady * 100).toFixed(0)}% within a steady frame's model); ` +
    `frame interval (median) ${s.frameMs.toFixed(2)} ms`);
  const late = s.f.late;
  console.log(`${transport}: samples after best + 1 ms: ${late.missed_frame} arrived before the best frame ` +
    `yet missed it (by at most ${late.missed_by_ms.toFixed(2)} ms), ${late.held} arrived after it, ` +
    `${late.unknown_round_trip} with no hold reported (judged on the smoothed RTT)`);
  console.log(`${transport}: page CPU per frame over the last ${Math.min(600, s.frames)} of ${s.frames} frames: ` +
    `mean ${s.mean.toFixed(3)} p50 ${s.p50.toFixed(3)} p99 ${s.p99.toFixed(3)} max ${s.max.toFixed(3)} ms; ` +
    `the session's share p50 ${s.sessionP50.toFixed(3)} p99 ${s.sessionP99.toFixed(3)} ms`);
  console.log(`${transport}: first frame drawn ${s.firstFrameMs.toFixed(0)} ms after the page was opened ` +
    `(wasm loaded, token fetched, transport open, connecting)`);
}

await checkPage("play", async (page, url, check) => {
  // A smaller window than the dashboard's: headless Chromium draws WebGL in software
  // (SwiftShader), whose cost grows with the pixels and holds the page's event loop back
  // (docs/web.md measures it).
  await page.setViewportSize({ width: 960, height: 720 });
  if (process.env.WEBTRANSPORT === "off") {
    // A rally built without the gateway (`cargo demo`'s): the WebSocket, and the page says why.
    await play(page, url, check, "", "websocket");
    const why = await page.evaluate(() => window.rallyPlay.transportWhy);
    check(/built without WebTransport/.test(why || ""), `the page says why: "${why}"`);
    return;
  }
  await play(page, url, check, "", "webtransport");
  // Leaving the first page closes its session: the second visit is a new player.
  await play(page, url, check, "?transport=ws", "websocket");
  // A token the client refuses is a message on the page, not a silent failure.
  const bad = await page.context().browser().newPage();
  await bad.goto(new URL("play?token=00ff", url).href);
  const said = await bad
    .waitForFunction(() => document.getElementById("status").textContent.startsWith("cannot play"))
    .then(() => bad.evaluate(() => document.getElementById("status").textContent), () => "nothing");
  check(said.includes("not a connect token"), `a bad token is said on the page: "${said}"`);
  await bad.close();
  // A certificate the page cannot trust (a wrong hash): WebTransport fails, the page falls
  // back to the WebSocket and says why.
  await page.route("**/play/token", async (route) => {
    const reply = await (await route.fetch()).json();
    await route.fulfill({ json: { ...reply, certificate_hash: "00".repeat(32) } });
  });
  await page.goto(new URL("play", url).href);
  const fellBack = await page
    .waitForFunction(() => window.rallyPlay && window.rallyPlay.phase === "joined", null, { timeout: 15000 })
    .then(() => page.evaluate(() => [window.rallyPlay.transport, window.rallyPlay.transportWhy]), () => []);
  check(fellBack[0] === "websocket" && /^WebTransport failed/.test(fellBack[1] || ""),
    `a certificate the page cannot trust: it fell back to ${fellBack[0]} (${fellBack[1]})`);
  const status = await page.textContent("#status");
  check(status.includes("WebTransport failed"), `the page says so: "${status}"`);
});
