/*
 * app.js - the jobd dashboard (served by jobd at /ui/; spec/ui.md).
 *
 * A client of jobd's public API and nothing more: every view is a few GET
 * calls with the key typed into the sign-in form (kept in this tab's
 * sessionStorage, sent as "Authorization: Bearer"; never in a URL). Views
 * poll every POLL_MS with If-None-Match, so an unchanged answer is a 304
 * and the view is not redrawn. No framework and no innerHTML: every value
 * from the API reaches the page through textContent or an attribute setter
 * (links are built only from "#/" routes), so a batch's metadata or a
 * custom_id can never become markup or script. The page's CSP (no inline
 * script or style) is the second wall. Charts are SVG built with the DOM.
 */
'use strict';
(function () {
  const POLL_MS = 1500;
  const FETCH_TIMEOUT_MS = 10000;
  const USAGE_DAYS = [7, 14, 30];
  const ACTIVE = ['validating', 'in_progress', 'finalizing'];
  const STATUSES = ['validating', 'failed', 'in_progress', 'finalizing', 'completed', 'expired',
    'cancelling', 'cancelled'];
  const store = window.sessionStorage;
  const state = {
    key: store.getItem('jobd.key') || '',
    admin: store.getItem('jobd.admin') || '',
    cache: new Map(),       /* "K path" / "A path" -> {etag, data} */
    view: null,
    gen: 0,                 /* bumped on navigation: late answers of an old view are dropped */
    timer: null,
    signedIn: false,
    answered: false,        /* some API call succeeded (the auth mode is known) */
  };
  const $ = (id) => document.getElementById(id);

  /* ---- DOM helpers (the only way anything reaches the page) ---------------- */

  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    setProps(e, props);
    for (const c of kids.flat(3)) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : String(c)); /* a string becomes a text node */
    }
    return e;
  }

  function setProps(e, props) {
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = String(v);
      else if (k === 'href') e.setAttribute('href', route(v));
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, String(v));
    }
  }

  /* Links are in-page routes only: never a URL that came from the API. */
  function route(v) {
    v = String(v);
    return /^#\/[A-Za-z0-9_./?=&%-]*$/.test(v) ? v : '#/';
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of kids.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  const enc = encodeURIComponent;
  const fmtInt = (n) => (Number(n) || 0).toLocaleString('en-US');
  function fmtCost(micros) {
    const d = (Number(micros) || 0) / 1e6;
    return '$' + (d >= 100 ? d.toFixed(2) : d.toFixed(4));
  }
  function fmtDur(sec) {
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return sec + 's';
    if (sec < 3600) return Math.floor(sec / 60) + 'm ' + (sec % 60) + 's';
    if (sec < 86400) return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
    return Math.floor(sec / 86400) + 'd ' + Math.floor((sec % 86400) / 3600) + 'h';
  }
  function fmtTime(t) {
    if (!t) return '';
    return new Date(t * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  }
  const now = () => Date.now() / 1000;
  const age = (t) => (t ? fmtDur(now() - t) + ' ago' : '');

  /* ---- the API ------------------------------------------------------------- */

  class ApiError extends Error {
    constructor(kind, status, message, code) {
      super(message);
      this.kind = kind;     /* down | auth | api */
      this.status = status;
      this.code = code || null;
    }
  }

  /* One call. GETs are conditional: an unchanged answer returns the cached
   * data with changed false. Throws ApiError. */
  async function api(method, path, opts) {
    opts = opts || {};
    const tok = opts.admin ? (state.admin || state.key) : state.key;
    const headers = {};
    if (tok) headers.Authorization = 'Bearer ' + tok;
    const ck = (opts.admin ? 'A ' : 'K ') + path;
    const cached = method === 'GET' ? state.cache.get(ck) : null;
    if (cached) headers['If-None-Match'] = cached.etag;
    let body;
    if (opts.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(opts.body);
    }
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    let r;
    try {
      r = await fetch(path, { method, headers, body, cache: 'no-store', credentials: 'omit',
        redirect: 'error', signal: ctl.signal });
    } catch (e) {
      throw new ApiError('down', 0, ctl.signal.aborted ? 'jobd did not answer within 10 s'
        : 'jobd is unreachable');
    } finally {
      clearTimeout(timer);
    }
    if (r.ok || r.status === 304) state.answered = true;
    if (r.status === 304 && cached) return { data: cached.data, changed: false };
    const text = await r.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!r.ok) {
      const err = (data && data.error) || {};
      const msg = err.message || ('HTTP ' + r.status);
      if (r.status === 401) throw new ApiError('auth', 401, msg, err.code);
      if (r.status >= 500)
        throw new ApiError('down', r.status, err.message ? 'jobd answered ' + r.status + ': ' + err.message
          : 'jobd\'s API is unavailable (HTTP ' + r.status + ' from ' + location.host + ')', err.code);
      throw new ApiError('api', r.status, msg, err.code);
    }
    const etag = r.headers.get('ETag');
    if (method === 'GET' && etag) {
      if (state.cache.size > 300) state.cache.delete(state.cache.keys().next().value);
      state.cache.set(ck, { etag, data });
    }
    return { data, changed: true };
  }

  /* Download a stored file with the key (a plain link could not carry it). */
  async function download(fileId, name) {
    const headers = state.key ? { Authorization: 'Bearer ' + state.key } : {};
    const r = await fetch('/v1/files/' + enc(fileId) + '/content', { headers, cache: 'no-store', credentials: 'omit' });
    if (!r.ok) throw new ApiError(r.status === 401 ? 'auth' : 'api', r.status, 'download failed: HTTP ' + r.status);
    save(await r.blob(), name);
  }

  /* Hand a blob to the browser as a download. */
  function save(blob, name) {
    const url = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = url; /* a blob: URL made here, never one from the API */
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  /* Download the result lines a batch has committed so far (GET
   * /v1/batches/ID/results, spec/jsonl.md "Partial results"): pages are
   * read with successive cursors while X-Has-More is true, and the loop
   * ends at X-Results-Complete or when no more lines are committed. */
  async function downloadResults(batchId, name) {
    const headers = state.key ? { Authorization: 'Bearer ' + state.key } : {};
    const parts = [];
    let after = '', lines = 0, complete = false;
    for (let page = 0; page < 100000; page++) {
      const r = await fetch('/v1/batches/' + enc(batchId) + '/results?limit=10000' + (after ? '&after=' + enc(after) : ''),
        { headers, cache: 'no-store', credentials: 'omit', redirect: 'error' });
      if (!r.ok) throw new ApiError(r.status === 401 ? 'auth' : 'api', r.status, 'download failed: HTTP ' + r.status);
      const text = await r.text(); /* the browser undoes Content-Encoding */
      if (text) {
        parts.push(text);
        for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) lines++;
      }
      complete = r.headers.get('X-Results-Complete') === 'true';
      const next = r.headers.get('X-Next-Cursor') || after;
      if (complete || r.headers.get('X-Has-More') !== 'true' || !text || next === after) break;
      after = next;
    }
    save(new Blob(parts, { type: 'application/jsonl' }), name);
    return { lines, complete };
  }

  /* ---- shell: sign-in, banner, navigation, polling -------------------------- */

  function banner(msg) {
    const b = $('banner');
    b.hidden = !msg;
    b.textContent = msg || '';
  }

  function showLogin(msg) {
    state.signedIn = false;
    state.gen++;
    clearTimeout(state.timer);
    $('main').replaceChildren();
    $('login').hidden = false;
    $('nav').hidden = true;
    $('signout').hidden = true;
    $('who').textContent = '';
    const m = $('login-msg');
    if (msg) {
      m.textContent = msg;
      m.className = 'error';
    }
    $('key').focus();
  }

  function showApp() {
    state.signedIn = true;
    $('login').hidden = true;
    $('nav').hidden = false;
    $('signout').hidden = !state.key && !state.admin;
    showWho();
    navigate();
  }

  /* The header's "who": known once a call was answered (no key + 200 = no-auth mode). */
  function showWho() {
    $('who').textContent = state.key ? 'key \u2026' + state.key.slice(-4)
      : state.answered ? 'no-auth mode (loopback)' : 'not signed in';
  }

  /* Is the key accepted? (Also how no-auth mode is found: no key, 200.) */
  async function probe() {
    try {
      await api('GET', '/v1/batches?limit=1');
      banner(null);
      showApp();
    } catch (e) {
      if (e.kind === 'auth') {
        const had = !!state.key;
        state.key = '';
        store.removeItem('jobd.key');
        showLogin(had ? 'The API key was refused: ' + e.message : null);
      } else {
        banner(downText(e));
        showApp(); /* keep polling: the view fills in when jobd answers */
      }
    }
  }

  function downText(e) {
    const what = e.status ? e.message : 'Cannot reach jobd at ' + location.host + ' (' + e.message + ')';
    return what + '. The page shows the last data it had and retries every ' + POLL_MS / 1000 + ' s.';
  }

  function parseRoute() {
    const raw = (location.hash || '#/batches').slice(1);
    const qi = raw.indexOf('?');
    const path = qi < 0 ? raw : raw.slice(0, qi);
    const q = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));
    const parts = path.split('/').filter(Boolean);
    if (parts[0] === 'batch' && parts[1]) {
      try {
        return { name: 'batch', id: decodeURIComponent(parts[1]), q };
      } catch (e) { /* a malformed %-escape: the list */ }
    }
    if (['batches', 'workers', 'usage', 'models'].includes(parts[0])) return { name: parts[0], q };
    return { name: 'batches', q };
  }

  function navigate() {
    if (!state.signedIn) return;
    clearTimeout(state.timer);
    state.gen++;
    const r = parseRoute();
    state.view = VIEWS[r.name](r);
    for (const a of document.querySelectorAll('#nav a'))
      a.classList.toggle('active', a.dataset.view === (r.name === 'batch' ? 'batches' : r.name));
    $('main').replaceChildren(h('p', { class: 'muted', text: 'Loading\u2026' }));
    refresh();
  }

  /* Redraw the current view now (after an action), then keep polling. */
  function redraw() {
    if (!state.signedIn || !state.view) return;
    state.view.force = true;
    clearTimeout(state.timer);
    state.gen++; /* a refresh still in flight is dropped: one polling chain at a time */
    refresh();
  }

  async function refresh() {
    const gen = state.gen;
    const v = state.view;
    try {
      const node = await v.update();
      if (gen !== state.gen) return;
      banner(null);
      showWho();
      if (node) {
        v.force = false;
        $('main').replaceChildren(node);
      }
    } catch (e) {
      if (gen !== state.gen) return;
      if (e.kind === 'auth') {
        state.key = '';
        store.removeItem('jobd.key');
        showLogin('The API key was refused: ' + e.message);
        return;
      }
      if (e.kind === 'down') banner(downText(e));
      else $('main').replaceChildren(h('p', { class: 'error', text: 'Error ' + e.status + ': ' + e.message }));
    }
    if (gen === state.gen && state.signedIn) state.timer = setTimeout(refresh, POLL_MS);
  }

  /* ---- shared widgets -------------------------------------------------------- */

  function progressBar(c) {
    const total = c.total || 0, done = (c.completed || 0) + (c.failed || 0);
    const pct = total ? Math.floor((100 * done) / total) : 0;
    const ok = h('div', { class: 'fill ok' }), bad = h('div', { class: 'fill bad' });
    ok.style.width = (total ? (100 * (c.completed || 0)) / total : 0) + '%'; /* CSSOM, allowed by the CSP */
    bad.style.width = (total ? (100 * (c.failed || 0)) / total : 0) + '%';
    return h('div', { class: 'bar', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100,
      'aria-valuenow': pct, title: done + ' of ' + total + ' done' }, ok, bad, h('span', { class: 'pct', text: pct + '%' }));
  }

  const badge = (status) => h('span', { class: 'badge st-' + String(status).replace(/[^a-z_]/g, ''), text: status });

  function table(cls, head, rows, empty) {
    if (!rows.length) return h('p', { class: 'muted ' + cls + '-empty', text: empty });
    return h('table', { class: cls },
      h('thead', null, h('tr', null, head.map((x) => h('th', { text: x })))),
      h('tbody', null, rows));
  }

  function button(text, onclick, props) {
    return h('button', Object.assign({ type: 'button', onclick }, props || {}), text);
  }

  /* Run an action from a button: its result or error shows as the view's flash. */
  function action(v, fn) {
    return async (ev) => {
      if (ev && ev.target) ev.target.disabled = true;
      try {
        v.flash = { ok: true, text: await fn() };
      } catch (e) {
        v.flash = { ok: false, text: e.message };
      }
      redraw();
    };
  }

  const flashNode = (v) => (v.flash ? h('p', { class: 'flash ' + (v.flash.ok ? 'ok' : 'error'), role: 'status', text: v.flash.text }) : null);

  /* ---- Batches ------------------------------------------------------------------ */

  function batchesView(r) {
    const lim = Number(r.q.get('limit'));
    const v = { status: STATUSES.includes(r.q.get('status')) ? r.q.get('status') : '', after: r.q.get('after') || '',
      limit: Number.isInteger(lim) && lim >= 1 && lim <= 100 ? lim : 20 };
    v.update = async () => {
      let p = '/v1/batches?limit=' + v.limit;
      if (v.status) p += '&status=' + enc(v.status);
      if (v.after) p += '&after=' + enc(v.after);
      const list = await api('GET', p);
      const data = list.data.data || [];
      let usage = { data: null, changed: false };
      if (data.length) {
        const since = Math.min(...data.map((b) => b.created_at));
        usage = await api('GET', '/v1/usage?group_by=batch&since=' + since);
      }
      if (!list.changed && !usage.changed && !v.force) return null;
      return renderBatches(v, list.data, usage.data);
    };
    return v;
  }

  function renderBatches(v, list, usage) {
    const sums = new Map(((usage && usage.data) || []).map((u) => [u.key, u]));
    const sel = h('select', { id: 'status-filter', 'aria-label': 'Filter by status' },
      h('option', { value: '' }, 'all statuses'), STATUSES.map((st) => h('option', { value: st }, st)));
    sel.value = v.status;
    sel.addEventListener('change', () => {
      const q = [sel.value ? 'status=' + sel.value : '', v.limit !== 20 ? 'limit=' + v.limit : ''].filter(Boolean).join('&');
      location.hash = '#/batches' + (q ? '?' + q : '');
    });
    const rows = (list.data || []).map((b) => {
      const u = sums.get(b.id) || {};
      const c = b.request_counts || {};
      return h('tr', { 'data-id': b.id },
        h('td', null, h('a', { href: '#/batch/' + enc(b.id), class: 'batch-link' }, b.id)),
        h('td', null, badge(b.status), b.waiting_for_model ? h('span', { class: 'muted', text: ' waiting for a worker' }) : null),
        h('td', { class: 'prog' }, progressBar(c)),
        h('td', { class: 'num counts', text: fmtInt(c.completed) + ' / ' + fmtInt(c.failed) + ' / ' + fmtInt(c.total) }),
        h('td', { class: 'num tokens', text: fmtInt(u.total_tokens || (b.usage && b.usage.total_tokens)) }),
        h('td', { class: 'num cost', text: fmtCost((u.cost && u.cost.amount_micros) || (b.cost && b.cost.amount_micros)) }),
        h('td', { class: 'model', text: b.model || '' }),
        h('td', { class: 'age', title: fmtTime(b.created_at), text: age(b.created_at) }));
    });
    const qs = [v.status ? 'status=' + v.status : '', v.limit !== 20 ? 'limit=' + v.limit : ''].filter(Boolean).join('&');
    return h('section', { id: 'view-batches' },
      h('div', { class: 'toolbar' }, h('h1', { text: 'Batches' }), sel),
      table('batches', ['Batch', 'Status', 'Progress', 'Done / failed / total', 'Tokens', 'Cost', 'Model', 'Age'], rows,
        v.status ? 'No ' + v.status + ' batches.' : 'No batches yet.'),
      h('div', { class: 'pager' },
        v.after ? h('a', { href: '#/batches' + (qs ? '?' + qs : ''), id: 'page-first' }, '\u2190 Newest') : null,
        list.has_more ? h('a', { href: '#/batches?' + (qs ? qs + '&' : '') + 'after=' + enc(list.last_id), id: 'page-older' }, 'Older \u2192') : null));
  }

  /* ---- Batch detail ----------------------------------------------------------- */

  function batchView(r) {
    const v = { id: r.id, samples: [], armed: false };
    const base = '/v1/batches/' + enc(r.id);
    v.update = async () => {
      const b = await api('GET', base);
      const dl = await api('GET', base + '/dead_letters?limit=100');
      /* per model of this batch (one row, or several when its model is "mixed") */
      const us = await api('GET', '/v1/usage?group_by=model&batch=' + enc(v.id) + '&since=' + b.data.created_at);
      const wh = await deliveriesFor(v.id);
      const of = await outputFile(b.data);
      const c = b.data.request_counts || {};
      const row = (us.data && us.data.totals) || {};
      const done = (c.completed || 0) + (c.failed || 0);
      const last = v.samples[v.samples.length - 1];
      if (!last || last.done !== done || last.tokens !== (row.total_tokens || 0))
        v.samples.push({ t: now(), done, tokens: row.total_tokens || 0 });
      if (v.samples.length > 120) v.samples.shift();
      if (!b.changed && !dl.changed && !us.changed && !wh.changed && !of.changed && !v.force) return null;
      return renderBatch(v, b.data, dl.data, us.data, wh.list, of.data);
    };
    return v;
  }

  /* The output (else error) file object: when it expires (404 once it has). */
  async function outputFile(b) {
    const id = b.output_file_id || b.error_file_id;
    if (!id) return { data: null, changed: false };
    try {
      return await api('GET', '/v1/files/' + enc(id));
    } catch (e) {
      if (e.kind === 'api' && e.status === 404) return { data: { id, gone: true }, changed: false };
      throw e;
    }
  }

  /* Webhook deliveries about this batch: each endpoint's recent deliveries,
   * kept when their object_id is the batch. */
  async function deliveriesFor(id) {
    const eps = await api('GET', '/v1/webhook_endpoints');
    let changed = eps.changed;
    const list = [];
    for (const ep of ((eps.data && eps.data.data) || []).slice(0, 10)) {
      const d = await api('GET', '/v1/webhook_endpoints/' + enc(ep.id) + '/deliveries?limit=100');
      changed = changed || d.changed;
      for (const x of (d.data && d.data.data) || []) if (x.object_id === id) list.push({ ep, d: x });
    }
    return { changed, list };
  }

  function rates(v, b) {
    const c = b.request_counts || {};
    const done = (c.completed || 0) + (c.failed || 0), left = (c.total || 0) - done;
    const t = now(), recent = v.samples.filter((x) => t - x.t <= 60);
    let rps = 0, tps = 0;
    if (recent.length >= 2) {
      const a = recent[0], z = recent[recent.length - 1];
      if (z.t > a.t) { rps = (z.done - a.done) / (t - a.t); tps = (z.tokens - a.tokens) / (t - a.t); }
    } else if (b.in_progress_at && done) {
      rps = done / Math.max(1, (b.finalizing_at || t) - b.in_progress_at);
    }
    const eta = ACTIVE.includes(b.status) && rps > 0 && left > 0 ? fmtDur(left / rps) : (left > 0 && ACTIVE.includes(b.status) ? 'unknown' : '\u2014');
    return { rps, tps, eta };
  }

  function renderBatch(v, b, dl, usage, deliveries, outFile) {
    const c = b.request_counts || {};
    const rt = rates(v, b);
    const timeline = [['created', b.created_at], ['in_progress', b.in_progress_at], ['finalizing', b.finalizing_at],
      ['completed', b.completed_at], ['failed', b.failed_at], ['expired', b.expired_at],
      ['cancelling', b.cancelling_at], ['cancelled', b.cancelled_at]].filter((x) => x[1]).sort((x, y) => x[1] - y[1]);
    const tlRows = timeline.map((x, i) => h('li', { 'data-state': x[0] },
      badge(x[0]), ' ', fmtTime(x[1]), i ? h('span', { class: 'muted', text: ' (+' + fmtDur(x[1] - timeline[i - 1][1]) + ')' }) : null));
    if (b.expires_at && ACTIVE.includes(b.status))
      tlRows.push(h('li', { class: 'muted', 'data-state': 'expires' }, 'expires ' + fmtTime(b.expires_at) + ' (in ' + fmtDur(b.expires_at - now()) + ')'));

    const files = [];
    if (b.input_file_id) files.push(button('Input file', action(v, async () => { await download(b.input_file_id, b.id + '-input.jsonl'); return 'Downloaded the input file.'; }), { id: 'dl-input' }));
    if (b.output_file_id) files.push(button('Output file', action(v, async () => { await download(b.output_file_id, b.id + '-output.jsonl'); return 'Downloaded the output file.'; }), { id: 'dl-output' }));
    if (b.error_file_id) files.push(button('Error file', action(v, async () => { await download(b.error_file_id, b.id + '-errors.jsonl'); return 'Downloaded the error file.'; }), { id: 'dl-errors' }));
    const partial = partialResults(v, b);
    if (partial) files.push(partial);

    const meta = Object.entries(b.metadata || {}).map(([k, val]) => h('tr', null, h('th', { text: k }), h('td', { text: val })));
    const errs = ((b.errors && b.errors.data) || []).map((e) => h('tr', null,
      h('td', { class: 'num', text: e.line == null ? '' : e.line }), h('td', { text: e.code || '' }), h('td', { text: e.message || '' })));
    const dead = ((dl && dl.data) || []).map((d) => h('tr', { 'data-id': d.id },
      h('td', { class: 'custom-id', text: d.custom_id }), h('td', { text: d.reason }), h('td', { class: 'num', text: d.attempts }),
      h('td', { class: 'last-error', text: d.last_error || '' }), h('td', { text: age(d.created_at) }),
      h('td', null, b.status === 'in_progress' ? button('Retry', action(v, async () => {
        await api('POST', '/v1/dead_letters/' + enc(d.id) + '/retry', { body: {} });
        return 'Requeued ' + d.custom_id + '.';
      }), { class: 'retry' }) : h('span', { class: 'muted', text: 'resubmit the line' }))));
    const whRows = deliveries.map(({ ep, d }) => h('tr', { 'data-id': d.id },
      h('td', { text: d.event_type }), h('td', { class: 'url', text: ep.url }), h('td', null, badge(d.status)),
      h('td', { class: 'num', text: d.attempts }), h('td', { class: 'num', text: d.last_status_code == null ? '' : d.last_status_code }),
      h('td', { text: d.last_error || '' }),
      h('td', null, button('Redeliver', action(v, async () => {
        await api('POST', '/v1/webhook_endpoints/' + enc(ep.id) + '/deliveries/' + enc(d.id) + '/redeliver', { body: {} });
        return 'Redelivery of ' + d.id + ' queued.';
      }), { class: 'redeliver' }))));

    let cancel = null;
    if (ACTIVE.includes(b.status)) {
      cancel = v.armed
        ? h('span', null, button('Confirm cancel', action(v, async () => {
          v.armed = false;
          await api('POST', '/v1/batches/' + enc(b.id) + '/cancel', { body: {} });
          return 'Cancel requested: unfinished requests are dropped, finished results are kept.';
        }), { id: 'cancel-confirm', class: 'danger' }), ' ', button('Keep running', () => { v.armed = false; redraw(); }, { id: 'cancel-keep' }))
        : button('Cancel batch\u2026', () => { v.armed = true; redraw(); }, { id: 'cancel', class: 'danger' });
    }

    /* one row per model (GET /v1/usage?group_by=model&batch=ID): a "mixed" batch has several */
    const models = (usage && usage.data) || [];
    const usageRowsB = usageRows(models, 'data-model');
    const tot = (usage && usage.totals) || {};
    if (models.length > 1)
      usageRowsB.push(h('tr', { class: 'total' }, h('th', { text: 'Total' }), h('td', { class: 'num', text: fmtInt(tot.num_model_requests) }),
        h('td', { class: 'num', text: fmtInt(tot.input_tokens) }), h('td', { class: 'num', text: fmtInt(tot.output_tokens) }),
        h('td', { class: 'num', text: fmtInt(tot.total_tokens) }), h('td', { class: 'num', text: fmtCost(tot.cost && tot.cost.amount_micros) })));

    /* the deadline (expires_at), jobd's estimate and whether it misses the deadline */
    const active = ACTIVE.includes(b.status);
    const deadline = b.expires_at ? fmtTime(b.expires_at) + (active ? ' (in ' + fmtDur(b.expires_at - now()) + ')' : '') : '';
    const est = b.estimated_completion_at ? fmtTime(b.estimated_completion_at) + ' (in ' + fmtDur(b.estimated_completion_at - now()) + ')' : '';
    const risk = b.deadline_at_risk ? h('p', { class: 'warn', id: 'deadline-risk', text: 'Deadline at risk: at the current throughput this batch should end at '
      + fmtTime(b.estimated_completion_at) + ', after its deadline ' + fmtTime(b.expires_at)
      + '. Add workers, raise metadata.priority, or resubmit with a longer completion window.' }) : null;
    const rerunOf = b.metadata && b.metadata.rerun_of;
    let expiry = null;
    if (outFile && outFile.gone) expiry = 'expired (the files answer 404)';
    else if (outFile) expiry = outFile.expires_at ? fmtTime(outFile.expires_at) + (outFile.expires_at > now() ? ' (in ' + fmtDur(outFile.expires_at - now()) + ')' : '') : 'never';

    return h('section', { id: 'view-batch', 'data-id': b.id, 'data-status': b.status },
      h('p', null, h('a', { href: '#/batches' }, '\u2190 Batches')),
      h('div', { class: 'toolbar' }, h('h1', { class: 'batch-id', text: b.id }), badge(b.status), cancel),
      flashNode(v),
      b.waiting_for_model ? h('p', { class: 'warn', text: 'No live worker serves ' + b.waiting_for_model.model + ': ' + b.waiting_for_model.requests + ' requests wait.' }) : null,
      h('div', { class: 'cards' },
        card('Progress', progressBar(c)),
        card('Completed', fmtInt(c.completed), 'completed'),
        card('Failed', fmtInt(c.failed), 'failed'),
        card('Total', fmtInt(c.total), 'total'),
        card('Token cost', fmtCost(b.cost && b.cost.amount_micros), 'token-cost'),
        b.fleet_cost ? card('Fleet cost', fmtCost(b.fleet_cost.amount_micros) + ' (' + fmtDur(Math.round((b.fleet_cost.worker_ms || 0) / 1000)) + ' of workers)', 'fleet-cost') : null,
        card('Throughput', rt.rps ? rt.rps.toFixed(2) + ' req/s' + (rt.tps ? ', ' + Math.round(rt.tps) + ' tok/s' : '') : '\u2014', 'throughput'),
        card('ETA', rt.eta, 'eta'),
        est ? card('Estimated completion (jobd)', est, 'estimate' + (b.deadline_at_risk ? ' risk' : '')) : null,
        est && deadline ? card('Deadline', deadline, 'deadline') : null),
      risk,
      h('div', { class: 'cols' },
        h('div', null, h('h2', { text: 'Timeline' }), h('ol', { class: 'timeline' }, tlRows)),
        h('div', null, h('h2', { text: 'Details' }), h('table', { class: 'kv' }, h('tbody', null,
          kv('Endpoint', b.endpoint), kv('Model', b.model || ''), kv('Completion window', b.completion_window),
          b.api === 'anthropic' ? kv('Created through', 'Anthropic Message Batches (msgbatch_' + b.id.replace(/^batch_/, '') + ')') : null,
          kv('Deadline (expires_at)', deadline),
          rerunOf ? h('tr', { class: 'rerun-of' }, h('th', { text: 'Rerun of' }),
            h('td', null, h('a', { href: '#/batch/' + enc(rerunOf), id: 'rerun-of' }, rerunOf))) : null,
          kv('Input file', b.input_file_id),
          expiry !== null ? h('tr', { class: 'output-expiry' }, h('th', { text: 'Output files expire' }), h('td', { text: expiry })) : null)),
        h('h2', { text: 'Files' }), files.length ? h('div', { class: 'files' }, files) : h('p', { class: 'muted', text: 'No files yet.' }))),
      h('h2', { text: 'Usage and cost by model' }),
      table('usage-models', ['Model', 'Requests', 'Input tokens', 'Output tokens', 'Total tokens', 'Cost'], usageRowsB, 'No usage yet.'),
      h('h2', { text: 'Metadata' }),
      table('metadata', ['Key', 'Value'], meta, 'No metadata.'),
      errs.length ? [h('h2', { text: 'Validation errors' }), table('errors', ['Line', 'Code', 'Message'], errs, '')] : null,
      h('h2', { text: 'Dead letters' }),
      table('dead-letters', ['custom_id', 'Reason', 'Attempts', 'Last error', 'Age', ''], dead, 'No dead letters.'),
      dl && dl.has_more ? h('p', { class: 'muted', text: 'The first 100 dead letters are shown (jobctl retry-dead handles them all).' }) : null,
      h('h2', { text: 'Webhook deliveries' }),
      table('deliveries', ['Event', 'Endpoint', 'Status', 'Attempts', 'Last HTTP status', 'Last error', ''], whRows, 'No webhook deliveries for this batch.'));
  }

  /* The results committed so far (GET /v1/batches/ID/results), in any state
   * once the batch has started: one JSONL stream of output and error lines. */
  function partialResults(v, b) {
    if (!b.in_progress_at) return null;
    const running = ACTIVE.includes(b.status) || b.status === 'cancelling';
    return button(running ? 'Results so far' : 'All results (one stream)', action(v, async () => {
      const r = await downloadResults(b.id, b.id + (running ? '-partial' : '-results') + '.jsonl');
      return 'Downloaded ' + r.lines + ' result line' + (r.lines === 1 ? '' : 's')
        + (r.complete ? ' (complete).' : ' (so far: the batch is still running).');
    }), { id: 'dl-partial' });
  }

  const kv = (k, val) => h('tr', null, h('th', { text: k }), h('td', { text: val == null ? '' : val }));
  const card = (title, body, cls) => h('div', { class: 'card' + (cls ? ' ' + cls : '') }, h('div', { class: 'card-title', text: title }),
    h('div', { class: 'card-body' }, body));

  /* ---- Workers (admin token) --------------------------------------------------- */

  function workersView() {
    const v = { history: new Map() };
    v.update = async () => {
      let r;
      try {
        r = await api('GET', '/v1/workers?limit=100', { admin: true });
      } catch (e) {
        if (e.kind !== 'auth') throw e;
        return h('section', { id: 'view-workers' }, h('h1', { text: 'Workers' }),
          h('p', { class: 'error', id: 'workers-auth', text: 'The Workers view needs the admin token (jobd --admin-token): sign out and sign in with it. (' + e.message + ')' }));
      }
      for (const w of r.data.data || []) {
        const hist = v.history.get(w.id) || [];
        hist.push(w.tokens_per_s || 0);
        if (hist.length > 40) hist.shift();
        v.history.set(w.id, hist);
      }
      return renderWorkers(v, r.data.data || []); /* every poll: the sparklines and ages move */
    };
    return v;
  }

  function spark(values) {
    const w = 120, ht = 24, max = Math.max(1, ...values);
    if (values.length === 1) values = [values[0], values[0]];
    const pts = values.map((x, i) => (values.length > 1 ? (i * w) / (values.length - 1) : 0).toFixed(1) + ',' + (ht - (x / max) * ht).toFixed(1));
    return s('svg', { class: 'spark', width: w, height: ht, viewBox: '0 0 ' + w + ' ' + ht, role: 'img', 'aria-label': 'tokens/s history' },
      s('polyline', { points: pts.join(' '), fill: 'none' }));
  }

  function renderWorkers(v, list) {
    const live = list.filter((w) => w.live !== false);
    const total = live.reduce((a, w) => a + (w.tokens_per_s || 0), 0);
    const rows = list.map((w) => h('tr', { 'data-id': w.id, class: w.live === false ? 'stale' : '' },
      h('td', { class: 'name', text: w.name }), h('td', { text: w.device }), h('td', { text: (w.models || []).join(', ') }),
      h('td', { class: 'num tps', text: (w.tokens_per_s || 0).toFixed(1) }), h('td', null, spark(v.history.get(w.id) || [])),
      h('td', { class: 'num packs', text: fmtInt(w.leases_held) }), h('td', { class: 'num', text: fmtInt(w.requests_held) }),
      h('td', { class: 'num per-hour', text: fmtCost(w.hourly_cost_micros) }),
      h('td', { title: fmtTime(w.last_heartbeat_at), text: age(w.last_heartbeat_at) }),
      h('td', null, badge(w.live === false ? 'stale' : 'live'))));
    return h('section', { id: 'view-workers' }, h('h1', { text: 'Workers' }),
      h('div', { class: 'cards' }, card('Live workers', fmtInt(live.length), 'n-live'), card('Tokens/s (live)', total.toFixed(1), 'tps-total')),
      table('workers', ['Name', 'Device', 'Models', 'Tokens/s', 'Recent', 'Packs in flight', 'Requests held', 'Per hour', 'Last heartbeat', ''], rows,
        'No worker has registered in the last 120 s.'));
  }

  /* ---- Usage ------------------------------------------------------------------- */

  function usageView(r) {
    const d = Number(r.q.get('days'));
    /* scope=all: every tenant's usage (GET /v1/admin/usage, the admin token) */
    const v = { days: USAGE_DAYS.includes(d) ? d : 14, all: r.q.get('scope') === 'all' };
    v.update = async () => {
      const today = Math.floor(now() / 86400) * 86400;
      const since = today - (v.days - 1) * 86400;
      const base = v.all ? '/v1/admin/usage' : '/v1/usage';
      const opts = { admin: v.all };
      let byDay, byModel, fleet, byTenant = { data: null, changed: false };
      try {
        byDay = await api('GET', base + '?group_by=day&since=' + since, opts);
        /* what the workers cost (spec/usage.md "Fleet cost"): per day, with the fleet's idle time */
        fleet = await api('GET', base + '?view=fleet&group_by=day&since=' + since, opts);
        byModel = await api('GET', base + '?group_by=model&since=' + since, opts);
        if (v.all) byTenant = await api('GET', base + '?group_by=tenant&since=' + since, opts);
      } catch (e) {
        if (!(v.all && e.kind === 'auth')) throw e;
        return h('section', { id: 'view-usage' }, h('h1', { text: 'Usage of every tenant' }),
          h('p', { class: 'error', id: 'usage-auth', text: 'Every tenant\'s usage needs the admin token: sign out and sign in with it. (' + e.message + ')' }));
      }
      if (!byDay.changed && !byModel.changed && !fleet.changed && !byTenant.changed && !v.force) return null;
      return renderUsage(v, since, byDay.data, byModel.data, byTenant.data, fleet.data);
    };
    return v;
  }

  function dayKey(t) {
    return new Date(t * 1000).toISOString().slice(0, 10);
  }

  /* One bar per day of the range (days without usage are zero-height bars). */
  function dayChart(id, title, since, days, sums, value, fmt) {
    const W = 720, H = 220, top = 20, bottom = 40, left = 70, right = 10;
    const vals = [];
    for (let i = 0; i < days; i++) {
      const k = dayKey(since + i * 86400);
      vals.push([k, value(sums.get(k) || {})]);
    }
    const max = Math.max(1, ...vals.map((x) => x[1]));
    const bw = (W - left - right) / days;
    const g = s('g', { class: 'bars' });
    vals.forEach(([k, x], i) => {
      const bh = ((H - top - bottom) * x) / max;
      g.append(s('rect', { class: 'col', x: (left + i * bw + 1).toFixed(1), y: (H - bottom - bh).toFixed(1), width: Math.max(1, bw - 2).toFixed(1),
        height: bh.toFixed(1), 'data-day': k, 'data-value': x }, s('title', null, k + ': ' + fmt(x))));
      if (days <= 14 || i % Math.ceil(days / 10) === 0)
        g.append(s('text', { x: (left + i * bw + bw / 2).toFixed(1), y: H - bottom + 14, 'text-anchor': 'middle', class: 'axis' }, k.slice(5)));
    });
    const axis = [0, 0.5, 1].map((f) => s('g', null,
      s('line', { x1: left, x2: W - right, y1: (H - bottom - f * (H - top - bottom)).toFixed(1), y2: (H - bottom - f * (H - top - bottom)).toFixed(1), class: 'grid' }),
      s('text', { x: left - 6, y: (H - bottom - f * (H - top - bottom) + 4).toFixed(1), 'text-anchor': 'end', class: 'axis' }, fmt(max * f))));
    return h('figure', { id, class: 'chart' }, h('figcaption', { text: title }),
      s('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': title }, axis, g));
  }

  /* One horizontal bar per model. */
  function modelChart(id, title, rows, value, fmt) {
    const W = 720, rowH = 26, left = 200, H = Math.max(1, rows.length) * rowH + 10;
    const max = Math.max(1, ...rows.map(value));
    const g = rows.map((u, i) => {
      const x = value(u), w = ((W - left - 120) * x) / max;
      return s('g', { 'data-model': u.key },
        s('text', { x: left - 8, y: i * rowH + 18, 'text-anchor': 'end', class: 'axis' }, u.key),
        s('rect', { class: 'col', x: left, y: i * rowH + 5, width: Math.max(1, w).toFixed(1), height: rowH - 10, 'data-value': x }),
        s('text', { x: left + w + 6, y: i * rowH + 18, class: 'axis' }, fmt(x)));
    });
    return h('figure', { id, class: 'chart' }, h('figcaption', { text: title }),
      s('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': title }, g));
  }

  function usageRows(list, attr) {
    return list.map((u) => h('tr', { [attr]: u.key }, h('td', { text: u.key }), h('td', { class: 'num', text: fmtInt(u.num_model_requests) }),
      h('td', { class: 'num', text: fmtInt(u.input_tokens) }), h('td', { class: 'num', text: fmtInt(u.output_tokens) }),
      h('td', { class: 'num', text: fmtInt(u.total_tokens) }), h('td', { class: 'num', text: fmtCost(u.cost && u.cost.amount_micros) })));
  }

  function fmtPct(x) {
    return (Number(x) || 0).toFixed(1) + '%';
  }

  function renderUsage(v, since, byDay, byModel, byTenant, fleet) {
    const sums = new Map(((byDay && byDay.data) || []).map((u) => [u.key, u]));
    const fsums = new Map(((fleet && fleet.data) || []).map((u) => [u.key, u]));
    const ft = (fleet && fleet.totals) || {}, fl = (fleet && fleet.fleet) || {};
    const amount = (o) => (o && o.amount_micros) || 0;
    const pct = (u) => Math.round((u.utilization || 0) * 1000) / 10;
    const models = (byModel && byModel.data) || [];
    const t = (byDay && byDay.totals) || {};
    const scope = v.all ? '&scope=all' : '';
    const pick = h('span', { class: 'days' }, USAGE_DAYS.map((d) => h('a', { href: '#/usage?days=' + d + scope, class: d === v.days ? 'active' : '' }, d + ' days')),
      h('a', { href: '#/usage?days=' + v.days + (v.all ? '' : '&scope=all'), id: 'usage-scope' }, v.all ? 'my tenant' : 'all tenants (admin)'));
    const rows = usageRows(models, 'data-model');
    return h('section', { id: 'view-usage', 'data-scope': v.all ? 'all' : 'tenant' },
      h('div', { class: 'toolbar' }, h('h1', { text: v.all ? 'Usage of every tenant' : 'Usage' }), pick),
      h('div', { class: 'cards' }, card('Cost', fmtCost(t.cost && t.cost.amount_micros), 'cost-total'), card('Tokens', fmtInt(t.total_tokens), 'tokens-total'),
        card('Requests', fmtInt(t.num_model_requests), 'requests-total'),
        card('Fleet cost', fmtCost(amount(ft.fleet_cost)), 'fleet-cost-total'),
        card('Fleet idle', fmtCost(amount(fl.idle)), 'fleet-idle-total'),
        card('Utilization', fmtPct(pct(fl)), 'fleet-utilization')),
      dayChart('chart-cost', 'Cost per day (UTC)', since, v.days, sums, (u) => (u.cost && u.cost.amount_micros) || 0, fmtCost),
      dayChart('chart-tokens', 'Tokens per day (UTC)', since, v.days, sums, (u) => u.total_tokens || 0, fmtInt),
      dayChart('chart-fleet-cost', 'Fleet cost per day (UTC): worker time of ' + (v.all ? 'the batches' : 'your batches'), since, v.days, fsums,
        (u) => amount(u.fleet_cost), fmtCost),
      dayChart('chart-fleet-idle', 'Fleet idle cost per day (UTC)', since, v.days, fsums, (u) => amount(u.idle), fmtCost),
      dayChart('chart-utilization', 'Fleet utilization per day (UTC): busy / registered worker time', since, v.days, fsums, pct, fmtPct),
      models.length ? modelChart('chart-models', 'Cost per model', models, (u) => (u.cost && u.cost.amount_micros) || 0, fmtCost) : null,
      models.length ? modelChart('chart-model-tokens', 'Tokens per model', models, (u) => u.total_tokens || 0, fmtInt) : null,
      table('models-usage', ['Model', 'Requests', 'Input tokens', 'Output tokens', 'Total tokens', 'Cost'], rows, 'No usage in this range.'),
      v.all ? [h('h2', { text: 'By tenant' }), table('tenants-usage', ['Tenant', 'Requests', 'Input tokens', 'Output tokens', 'Total tokens', 'Cost'],
        usageRows((byTenant && byTenant.data) || [], 'data-tenant'), 'No usage in this range.')] : null);
  }

  /* ---- Models -------------------------------------------------------------------- */

  function modelsView() {
    const v = {};
    v.update = async () => {
      const r = await api('GET', '/v1/models');
      if (!r.changed && !v.force) return null;
      const rows = (r.data.data || []).map((m) => h('tr', { 'data-id': m.id }, h('td', { class: 'name', text: m.id }),
        h('td', { text: m.root || m.id }), h('td', { class: 'num', text: fmtInt(m.workers) })));
      return h('section', { id: 'view-models' }, h('h1', { text: 'Models served' }),
        table('models', ['Name', 'Canonical model', 'Live workers'], rows, 'No live worker serves a model: batches wait until one registers.'));
    };
    return v;
  }

  const VIEWS = { batches: batchesView, batch: batchView, workers: workersView, usage: usageView, models: modelsView };

  /* ---- start ------------------------------------------------------------------------ */

  function start() {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      state.key = $('key').value.trim();
      state.admin = $('admin').value.trim();
      $('key').value = '';
      $('admin').value = '';
      if (state.key) store.setItem('jobd.key', state.key); else store.removeItem('jobd.key');
      if (state.admin) store.setItem('jobd.admin', state.admin); else store.removeItem('jobd.admin');
      state.cache.clear();
      probe();
    });
    $('signout').addEventListener('click', () => {
      store.removeItem('jobd.key');
      store.removeItem('jobd.admin');
      state.key = state.admin = '';
      state.cache.clear();
      const m = $('login-msg');
      m.textContent = 'Signed out.';
      m.className = 'muted';
      showLogin(null);
    });
    window.addEventListener('hashchange', navigate);
    probe();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
