/* SPDX-License-Identifier: MIT */
/* opjit report's script (inlined into every page by report_assets.c): the flame graph zooms
 * on a click (the frame becomes the root, its callers stay above it, faded), searches frame
 * names, and shows a tooltip per frame; the timeline's markers and its chart of samples per
 * interval get the same tooltip. The page reads completely without it: every drawing is
 * static SVG with <title> tooltips, which this script replaces by its own. */
(function () {
  'use strict';
  document.documentElement.classList.add('js');
  var tip = document.getElementById('tip');

  /* Shows the tooltip near the pointer of event ev with lines, each [label, text] ('' label:
   * the text alone, as the title line). */
  function showTip(ev, lines) {
    tip.textContent = '';
    lines.forEach(function (l, i) {
      if (i)
        tip.appendChild(document.createElement('br'));
      if (l[0]) {
        var b = document.createElement('b');
        b.textContent = l[0] + ': ';
        tip.appendChild(b);
      }
      tip.appendChild(document.createTextNode(l[1]));
    });
    tip.style.display = 'block';
    var x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth - 8)
      x = Math.max(8, ev.clientX - tip.offsetWidth - 14);
    if (y + tip.offsetHeight > window.innerHeight - 8)
      y = Math.max(8, ev.clientY - tip.offsetHeight - 14);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }

  /* The element's <title> text, removed (this script's tooltip takes its place). */
  function takeTitle(el) {
    var title = el.querySelector('title');
    if (!title)
      return '';
    el.removeChild(title);
    return title.textContent;
  }

  function pct(n, of) { return (100 * n / of).toFixed(n * 1000 >= of ? 1 : 2) + '%'; }

  /* ---- the timeline: a marker's event, or a lane's signature, in the tooltip ---- */
  var timeline = document.getElementById('timeline');
  if (timeline) {
    Array.prototype.forEach.call(timeline.querySelectorAll('g.lane, circle.ev'), function (el) {
      el._tip = takeTitle(el);
    });
    /* The samples per interval: the interval under the pointer, each layer's samples in it
     * and the share of calls JIT kernels served. */
    var series = document.getElementById('tl-series');
    var layers = [], share = null, calls = [];
    if (series) {
      calls = series.getAttribute('data-calls').split(' ');
      Array.prototype.forEach.call(series.querySelectorAll('polygon.sa'), function (p) {
        takeTitle(p);
        layers.push({name: p.getAttribute('data-name'),
                     v: p.getAttribute('data-v').split(' ').map(Number)});
      });
      var line = series.querySelector('path.tl-share');
      if (line) {
        takeTitle(line);
        share = line.getAttribute('data-share').split(' ');
      }
    }
    function fmtNs(ns) {
      return ns >= 1e9 ? (ns / 1e9).toFixed(2) + ' s' : (ns / 1e6).toFixed(ns >= 1e7 ? 0 : 1) + ' ms';
    }
    function seriesTip(ev) {
      var pt = timeline.createSVGPoint();
      pt.x = ev.clientX, pt.y = ev.clientY;
      var p = pt.matrixTransform(timeline.getScreenCTM().inverse());
      var x0 = +timeline.getAttribute('data-x0'), pw = +timeline.getAttribute('data-pw');
      var span = +timeline.getAttribute('data-span'), iv = +series.getAttribute('data-iv');
      var off = +series.getAttribute('data-off');
      var k = Math.floor(((p.x - x0) / pw * span - off) / iv);
      if (k < 0 || k >= +series.getAttribute('data-n')) {
        hideTip();
        return;
      }
      var from = off + k * iv, all = 0;
      layers.forEach(function (l) { all += l.v[k]; });
      var lines = [['', fmtNs(from) + ' to ' + fmtNs(Math.min(from + iv, span)) + ' into the run']];
      if (layers.length)
        lines.push(['samples', String(all)]);
      layers.slice().reverse().forEach(function (l) {
        if (l.v[k])
          lines.push([l.name, l.v[k] + ' (' + pct(l.v[k], all) + ')']);
      });
      lines.push(['operator calls', calls[k] || '0']);
      if (share)
        lines.push(['JIT served', share[k] === '-' ? 'no call' :
                    (100 * share[k]).toFixed(1) + '% of the calls']);
      showTip(ev, lines);
    }
    timeline.addEventListener('mousemove', function (ev) {
      if (series && ev.target.closest && ev.target.closest('#tl-series')) {
        seriesTip(ev);
        return;
      }
      var c = ev.target.closest ? ev.target.closest('circle.ev') : null;
      var lane = ev.target.closest ? ev.target.closest('g.lane') : null;
      if (!lane) {
        hideTip();
        return;
      }
      var name = lane.getAttribute('data-name');
      var lines = [['', name], ['signature', lane.getAttribute('data-sig')],
                   ['state', lane.getAttribute('data-state')]];
      if (lane.getAttribute('data-why'))
        lines.push(['why', lane.getAttribute('data-why')]);
      if (c) { /* its title: "TIME: KIND NAME[: DETAIL]" */
        var t = c.getAttribute('data-t'), kind = c.getAttribute('data-kind');
        var head = t + ': ' + kind + ' ' + name + ': ';
        lines.unshift(['', kind + ' at ' + t + ' into the run']);
        if (c._tip.indexOf(head) === 0)
          lines.push(['detail', c._tip.slice(head.length)]);
      }
      showTip(ev, lines);
    });
    timeline.addEventListener('mouseleave', hideTip);
  }

  /* ---- the flame graph ---- */
  var svg = document.getElementById('flame');
  if (!svg)
    return;
  var W = +svg.getAttribute('width'), CHAR_PX = 7, MIN_PX = 0.25;
  var kinds = {root: 'run, operator or program', program: 'program', agent: 'opjit interposer',
               library: "operator's library", jit: 'JIT code'};
  var frames = [];
  Array.prototype.forEach.call(svg.querySelectorAll('g.f'), function (g) {
    takeTitle(g);
    var rect = g.querySelector('rect'), text = g.querySelector('text');
    if (!text) {
      text = document.createElementNS(svg.namespaceURI, 'text');
      g.appendChild(text);
    }
    var name = g.getAttribute('data-n'), tick = name.indexOf('`');
    var kind = /k-(\w+)/.exec(rect.getAttribute('class'));
    g._f = {g: g, rect: rect, text: text, name: name, lower: name.toLowerCase(),
            module: tick > 0 ? name.slice(0, tick) : '', symbol: name.slice(tick + 1),
            kind: kind ? kinds[kind[1]] || kind[1] : '', o: +g.getAttribute('data-o'),
            s: +g.getAttribute('data-s'), d: +g.getAttribute('data-d'),
            y: +rect.getAttribute('y')};
    frames.push(g._f);
  });
  if (!frames.length)
    return;
  var root = frames[0], zoomed = root, total = root.s || 1;

  /* Shows f at x, w px: its rectangle, and its name cut to what fits. */
  function place(f, x, w) {
    f.g.classList.remove('off');
    f.rect.setAttribute('x', x.toFixed(2));
    f.rect.setAttribute('width', w.toFixed(2));
    var chars = Math.floor((w - 6) / CHAR_PX);
    f.text.setAttribute('x', (x + 3).toFixed(2));
    f.text.setAttribute('y', f.y + 13);
    f.text.textContent = chars < 3 ? '' :
        f.name.length <= chars ? f.name : f.name.slice(0, chars - 1) + '\u2026';
  }

  /* Makes z the root: what it holds spreads over the full width, its callers span it
   * (faded), everything else is hidden. */
  function zoom(z) {
    zoomed = z;
    frames.forEach(function (f) {
      var inside = f.d >= z.d && f.o >= z.o && f.o + f.s <= z.o + z.s;
      var above = f.d < z.d && f.o <= z.o && f.o + f.s >= z.o + z.s;
      f.g.classList.toggle('anc', above);
      if (above) {
        place(f, 0, W);
        return;
      }
      var w = f.s * W / z.s;
      if (!inside || w < MIN_PX) {
        f.g.classList.add('off');
        return;
      }
      place(f, (f.o - z.o) * W / z.s, w);
    });
    document.getElementById('flame-reset').disabled = z === root;
    search();
  }

  /* Marks the frames whose name holds the search text; says how many samples they cover
   * (nested matches counted once) of the whole and of the zoomed frame. */
  var input = document.getElementById('flame-search');
  var status = document.getElementById('flame-status');
  function search() {
    var q = input.value.trim().toLowerCase(), spans = [];
    frames.forEach(function (f) {
      var hit = q !== '' && f.lower.indexOf(q) >= 0;
      f.g.classList.toggle('hit', hit);
      if (hit)
        spans.push([f.o, f.o + f.s]);
    });
    if (q === '') {
      status.textContent = zoomed === root ? '' : 'zoomed on ' + zoomed.name + ': ' +
          zoomed.s + ' samples, ' + pct(zoomed.s, total) + ' of all';
      return;
    }
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var covered = 0, inZoom = 0, end = -1;
    spans.forEach(function (s) {
      var from = Math.max(s[0], end);
      if (s[1] > from) {
        covered += s[1] - from;
        inZoom += Math.max(0, Math.min(s[1], zoomed.o + zoomed.s) - Math.max(from, zoomed.o));
        end = s[1];
      }
    });
    status.textContent = spans.length + ' frame' + (spans.length === 1 ? '' : 's') +
        ' match: ' + covered + ' samples, ' + pct(covered, total) + ' of all' +
        (zoomed === root ? '' : ', ' + pct(inZoom, zoomed.s) + ' of the zoomed frame');
  }
  input.addEventListener('input', search);
  document.getElementById('flame-reset').addEventListener('click', function () { zoom(root); });

  function frameOf(ev) {
    var g = ev.target.closest ? ev.target.closest('g.f') : null;
    return g ? g._f : null;
  }
  svg.addEventListener('click', function (ev) {
    var f = frameOf(ev);
    if (f)
      zoom(f === zoomed ? root : f);
  });
  svg.addEventListener('mousemove', function (ev) {
    var f = frameOf(ev);
    if (!f) {
      hideTip();
      return;
    }
    showTip(ev, [['', f.symbol], ['module', f.module || '\u2014'], ['kind', f.kind],
                 ['samples', f.s + ' (' + pct(f.s, total) + ' of all' +
                  (zoomed === root || f.d < zoomed.d ? '' : ', ' + pct(f.s, zoomed.s) +
                   ' of the zoomed frame') + ')']]);
  });
  svg.addEventListener('mouseleave', hideTip);
  zoom(root);
})();
