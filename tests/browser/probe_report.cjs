// SPDX-License-Identifier: MIT
// Drives an `opjit report` page in headless Chromium (playwright-core) as a reader would and
// prints what it saw as one JSON object for test_browser.c to judge: console errors, the
// flame graph's zoom, search and tooltip, the timeline's markers, its samples per interval
// and their tooltip (and the step that failed, if one did), and the same page without
// JavaScript. Saves a screenshot of the page, and
// SHOT-zoomed.png of the flame graph zoomed and searched with a tooltip.
// Usage: node probe_report.cjs PLAYWRIGHT_CORE_DIR CHROMIUM PAGE.html SHOT.png
'use strict';
const [playwrightDir, browserPath, page, shot] = process.argv.slice(2);
const { chromium } = require(playwrightDir);

(async () => {
  const out = { errors: [] };
  const browser = await chromium.launch({ executablePath: browserPath, headless: true,
                                          args: ['--no-sandbox', '--disable-gpu'] });
  try {
    const tab = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    tab.setDefaultTimeout(10000);
    tab.on('console', (m) => { if (m.type() === 'error') out.errors.push(m.text()); });
    tab.on('pageerror', (e) => out.errors.push(String(e)));
    tab.on('requestfailed', (r) => out.errors.push('request failed: ' + r.url()));
    const requests = [];
    tab.on('request', (r) => requests.push(r.url()));
    await tab.goto('file://' + page, { waitUntil: 'load' });
    out.requests = requests;
    out.js = await tab.evaluate(() => document.documentElement.classList.contains('js'));

    // Frame geometry, as drawn now.
    const frames = () => tab.$$eval('#flame g.f', (gs) => gs.map((g) => {
      const r = g.querySelector('rect');
      return { name: g.getAttribute('data-n'), depth: +g.getAttribute('data-d'),
               width: +r.getAttribute('width'), shown: !g.classList.contains('off'),
               hit: g.classList.contains('hit') };
    }));
    out.width = await tab.$eval('#flame', (s) => +s.getAttribute('width'));
    const before = await frames();
    out.frames = before.length;
    // The widest frame below the operators that is less than half the width: zoom on it.
    let pick = -1;
    before.forEach((f, i) => {
      if (f.depth >= 2 && f.width < out.width / 2 && f.width > 12 &&
          (pick < 0 || f.width > before[pick].width))
        pick = i;
    });
    out.picked = pick < 0 ? null : before[pick];
    if (pick >= 0) {
      const g = (await tab.$$('#flame g.f'))[pick];
      await g.$eval('rect', (r) => r.scrollIntoView({ block: 'center' }));
      const box = await (await g.$('rect')).boundingBox();
      await tab.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      out.tip = await tab.$eval('#tip', (t) => ({ shown: getComputedStyle(t).display !== 'none',
                                                  text: t.innerText }));
      await tab.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
      const zoomed = await frames();
      out.zoomedWidth = zoomed[pick].width;
      out.hiddenAfterZoom = zoomed.filter((f) => !f.shown).length;
      // Search for the picked frame's symbol (its name after the module), zoomed.
      const name = before[pick].name;
      out.query = name.slice(name.indexOf('`') + 1);
      await tab.fill('#flame-search', out.query);
      const searched = await frames();
      out.hits = searched.filter((f) => f.hit).map((f) => f.name);
      out.status = await tab.$eval('#flame-status', (s) => s.textContent);
      out.hitFill = await tab.$eval('#flame g.f.hit rect', (r) => getComputedStyle(r).fill);
      // The zoomed, searched graph with a tooltip, as a second picture.
      const zbox = await (await g.$('rect')).boundingBox();
      await tab.mouse.move(zbox.x + 40, zbox.y + zbox.height / 2);
      const area = await (await tab.$('#flame')).boundingBox();
      await tab.screenshot({ path: shot.replace(/\.png$/, '-zoomed.png'),
                             clip: { x: 0, y: Math.max(0, area.y - 90), width: 1280,
                                     height: Math.min(area.height + 90, 900) } });
      await tab.click('#flame-reset');
      out.resetWidth = (await frames())[pick].width;
    }
    out.markers = await tab.$$eval('#timeline circle.ev', (cs) => cs.map((c) => ({
      kind: c.getAttribute('data-kind'), x: +c.getAttribute('cx'), t: c.getAttribute('data-t'),
      ns: +c.getAttribute('data-ns') })));
    out.axis = await tab.$eval('#timeline', (s) => ({ x0: +s.getAttribute('data-x0'),
      pw: +s.getAttribute('data-pw'), span: +s.getAttribute('data-span') })).catch(() => null);
    // The samples per interval: each layer's drawn extent, and the tooltip over the interval
    // with the most samples.
    out.layers = await tab.$$eval('#tl-series polygon.sa', (ps) => ps.map((p) => {
      const b = p.getBBox();
      return { name: p.getAttribute('data-name'), x: b.x, width: b.width, height: b.height,
               samples: p.getAttribute('data-v').split(' ').reduce((a, v) => a + +v, 0) };
    }));
    out.share = await tab.$eval('#tl-series path.tl-share', (p) => p.getAttribute('d'))
                         .catch(() => null);
    const band = await tab.$('#tl-series rect.tl-hover');
    if (band) {
      const k = await tab.$$eval('#tl-series polygon.sa', (ps) => {
        const sum = [];
        ps.forEach((p) => p.getAttribute('data-v').split(' ').forEach((v, i) => {
          sum[i] = (sum[i] || 0) + +v;
        }));
        return sum.indexOf(Math.max.apply(null, sum.length ? sum : [0]));
      });
      const geo = await tab.$eval('#tl-series', (g) => ({ iv: +g.getAttribute('data-iv'),
                                                        off: +g.getAttribute('data-off') }));
      await band.scrollIntoViewIfNeeded();
      const box = await band.boundingBox();
      const t = geo.off + (Math.max(k, 0) + 0.5) * geo.iv;
      await tab.mouse.move(box.x + box.width * Math.min(t / out.axis.span, 0.999),
                           box.y + box.height / 2);
      out.seriesTip = await tab.$eval('#tip', (t) => ({
        shown: getComputedStyle(t).display !== 'none', text: t.innerText }));
    }
    const marker = await tab.$('#timeline circle.ev[data-kind="published"]') ||
                   await tab.$('#timeline circle.ev');
    if (marker) {
      await marker.scrollIntoViewIfNeeded();
      const box = await marker.boundingBox();
      const x = box.x + box.width / 2, y = box.y + box.height / 2;
      await tab.mouse.move(x, y);
      out.markerTip = await tab.$eval('#tip', (t) => ({
        shown: getComputedStyle(t).display !== 'none', text: t.innerText }));
      // The marker on top there (a verification is drawn over its publication).
      out.markerKind = await tab.evaluate(([x, y]) =>
          document.elementFromPoint(x, y).getAttribute('data-kind'), [x, y]);
    }
    out.events = await tab.$eval('#timeline', (s) => +s.getAttribute('data-events'))
                          .catch(() => 0);
    out.swatches = await tab.$$eval('.legend .key', (ks) => ks.map((k) =>
        getComputedStyle(k).backgroundColor));
    await tab.fill('#flame-search', '').catch(() => {});
    await tab.mouse.move(0, 0);
    await tab.screenshot({ path: shot, fullPage: true });

    // Without JavaScript: every drawing still there, with its plain tooltips; no dead controls.
    const ctx = await browser.newContext({ javaScriptEnabled: false });
    const bare = await ctx.newPage();
    await bare.goto('file://' + page, { waitUntil: 'load' });
    out.nojs = await bare.evaluate(() => ({
      frames: document.querySelectorAll('#flame g.f rect').length,
      titled: document.querySelectorAll('#flame g.f > title').length,
      markers: document.querySelectorAll('#timeline circle.ev > title').length,
      layers: document.querySelectorAll('#tl-series polygon.sa > title').length,
      tools: getComputedStyle(document.querySelector('.flame-tools')).display,
      height: document.body.scrollHeight }));
    await ctx.close();
  } catch (e) { /* a step the page did not allow: said, with what was seen before it */
    out.failed = String(e && e.message || e).split('\n')[0];
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
