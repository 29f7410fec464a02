#!/usr/bin/env node
// End-to-end tests of the management web UI in headless Chromium (Debian's
// `chromium`, driven by playwright-core), with node's own test runner:
//
//   LAVINMQ_HTTP_URL=http://127.0.0.1:15672 node --test-reporter=spec tests/compat/node/ui_e2e.js
//
// Knobs (environment):
//   LAVINMQ_HTTP_URL  the broker's HTTP port (default http://127.0.0.1:15672)
//   UI_USER/UI_PASS   an administrator (default guest/guest)
//   CHROMIUM          the browser binary (default /usr/bin/chromium)
//   UI_SCREENSHOTS    where the screenshots go (default target/ui-screenshots)
//   OIDC_ISSUER       the identity provider (oidc_provider.js) the broker's
//                     [oauth] names, with client_id and mgmt_base_url set:
//                     the single sign-on test runs only with it
//
// Every test makes the entities it needs under names of its own and removes
// them afterwards. Waits are generous (a busy 2-core CI machine); none of
// them is an assertion on how fast something happens.
'use strict';

const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const amqp = require('amqplib');
const { chromium } = require('playwright-core');

const BASE = (process.env.LAVINMQ_HTTP_URL || 'http://127.0.0.1:15672').replace(/\/+$/, '');
const USER = process.env.UI_USER || 'guest';
const PASS = process.env.UI_PASS || 'guest';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ROOT = path.resolve(__dirname, '..', '..', '..');
const SHOTS = path.resolve(ROOT, process.env.UI_SCREENSHOTS || 'target/ui-screenshots');
const AUTH = 'Basic ' + Buffer.from(`${USER}:${PASS}`).toString('base64');
const OIDC_ISSUER = (process.env.OIDC_ISSUER || '').replace(/\/+$/, '');

/** The default wait for anything to appear or change. */
const WAIT_MS = 30000;
/** Waits that span the pages' 5 s polling several times. */
const LONG_WAIT_MS = 90000;
/** The most one test may take. */
const TEST_TIMEOUT_MS = 240000;

const suffix = () => crypto.randomBytes(4).toString('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- the API, from node ------------------------------------------------------

/** An API call as the administrator; returns {status, body}. */
async function api(method, p, body) {
  const headers = { Authorization: AUTH, Accept: 'application/json' };
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(BASE + p, init);
  const text = await resp.text();
  let parsed = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // not JSON
  }
  return { status: resp.status, body: parsed };
}

/** An API call that must succeed; returns the body. */
async function apiOk(method, p, body) {
  const r = await api(method, p, body);
  assert.ok(r.status >= 200 && r.status < 300, `${method} ${p}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Deletes, ignoring what is already gone. */
async function apiDelete(p) {
  try {
    const r = await api('DELETE', p);
    if (r.status >= 300 && r.status !== 404) console.error(`cleanup: DELETE ${p}: ${r.status}`);
  } catch (e) {
    console.error(`cleanup: DELETE ${p}: ${e.message}`);
  }
}

const enc = encodeURIComponent;

/** Waits until `fn` returns a truthy value; fails after `ms` with `what`. */
async function eventually(fn, what, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      if (e instanceof assert.AssertionError) throw e;
      last = e;
    }
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await sleep(250);
  }
}

/** The broker's AMQP URL, from the listeners /api/overview reports. */
async function amqpUrl(vhost) {
  const o = await apiOk('GET', '/api/overview');
  const l = (o.listeners || []).find((x) => x.protocol === 'amqp');
  assert.ok(l, 'an AMQP listener in /api/overview');
  const host = new URL(BASE).hostname;
  return `amqp://${enc(USER)}:${enc(PASS)}@${host}:${l.port}/${enc(vhost)}`;
}

// --- the stream protocol, by hand --------------------------------------------

/** The broker's stream listener port, from the listeners /api/overview reports. */
async function streamPort() {
  const o = await apiOk('GET', '/api/overview');
  const l = (o.listeners || []).find((x) => x.protocol === 'stream');
  assert.ok(l, 'a stream listener in /api/overview');
  return l.port;
}

const u8 = (n) => Buffer.from([n]);
const u16 = (n) => { const b = Buffer.alloc(2); b.writeUInt16BE(n); return b; };
const u32 = (n) => { const b = Buffer.alloc(4); b.writeUInt32BE(n); return b; };
const u64 = (n) => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b; };
const str = (s) => Buffer.concat([u16(Buffer.byteLength(s)), Buffer.from(s)]);
const map = (o) => Buffer.concat([u32(Object.keys(o).length), ...Object.entries(o).flatMap(([k, v]) => [str(k), str(v)])]);
const blob = (b) => Buffer.concat([u32(b.length), b]);
/** An AMQP 1.0 message of one short data section, as stream clients publish. */
const amqp1Body = (text) => Buffer.concat([Buffer.from([0x00, 0x53, 0x75, 0xa0, Buffer.byteLength(text)]), Buffer.from(text)]);

/**
 * A stream-protocol connection (RabbitMQ's binary protocol) written by hand,
 * with the few commands the tests need: each request's answer is awaited by
 * correlation id, the broker's tune is echoed, confirms are counted and
 * deliveries ignored.
 */
class StreamClient {
  constructor(socket) {
    this.socket = socket;
    this.buf = Buffer.alloc(0);
    this.nextId = 0;
    this.waiting = new Map();
    this.confirmed = 0;
    this.tuned = new Promise((resolve) => (this.onTune = resolve));
    this.closed = false;
    socket.once('close', () => (this.closed = true));
    socket.on('data', (d) => this.read(d));
    socket.on('error', () => undefined);
  }

  /** Logs in as the administrator on vhost "/", with `properties` as peer properties. */
  static async connect(port, properties = {}) {
    const socket = require('node:net').connect(port, new URL(BASE).hostname);
    await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    const c = new StreamClient(socket);
    await c.call(0x0011, map(properties));
    await c.call(0x0012);
    await c.call(0x0013, str('PLAIN'), blob(Buffer.from(`\0${USER}\0${PASS}`)));
    await c.tuned;
    await c.call(0x0015, str('/'));
    return c;
  }

  /** Sends one frame: key, version 1, then `parts`. */
  send(key, ...parts) {
    const body = Buffer.concat([u16(key), u16(1), ...parts]);
    this.socket.write(Buffer.concat([u32(body.length), body]));
  }

  /** A request with a correlation id; resolves when the broker answers OK. */
  call(key, ...parts) {
    const id = ++this.nextId;
    const answered = new Promise((resolve, reject) => this.waiting.set(id, { key, resolve, reject }));
    this.send(key, u32(id), ...parts);
    return answered;
  }

  read(data) {
    this.buf = Buffer.concat([this.buf, data]);
    while (this.buf.length >= 4 && this.buf.length >= 4 + this.buf.readUInt32BE(0)) {
      const frame = this.buf.subarray(4, 4 + this.buf.readUInt32BE(0));
      this.buf = this.buf.subarray(4 + frame.length);
      const key = frame.readUInt16BE(0);
      if (key === 0x0014) {
        // Tune: the broker's frame size, no heartbeats.
        this.send(0x0014, frame.subarray(4, 8), u32(0));
        this.onTune();
      } else if (key === 0x0003) {
        // Publish confirm: publisher id, then the confirmed publishing ids.
        this.confirmed += frame.readUInt32BE(5);
      } else if (key === 0x0016) {
        // The broker closes the connection: answer OK.
        this.send(0x8016, frame.subarray(4, 8), u16(1));
      } else if (key & 0x8000) {
        const w = this.waiting.get(frame.readUInt32BE(4));
        if (!w) continue;
        this.waiting.delete(frame.readUInt32BE(4));
        const code = frame.readUInt16BE(8);
        if (code === 1) w.resolve();
        else w.reject(new Error(`stream command 0x${w.key.toString(16)}: response code ${code}`));
      }
    }
  }

  /** Declares publisher `id` on `stream`, with a publisher reference. */
  declarePublisher(id, reference, stream) {
    return this.call(0x0001, u8(id), str(reference), str(stream));
  }

  /** Publishes `texts` as publisher `id`, with publishing ids from `first`. */
  publish(id, texts, first = 1) {
    const messages = texts.flatMap((t, i) => [u64(first + i), blob(amqp1Body(t))]);
    this.send(0x0002, u8(id), u32(texts.length), ...messages);
  }

  /** Subscribes `id` to `stream` from its first offset, with `credit` chunks of credit. */
  subscribe(id, stream, credit, properties = {}) {
    return this.call(0x0007, u8(id), str(stream), u16(1), u16(credit), map(properties));
  }

  destroy() {
    this.socket.destroy();
  }
}

// --- the browser ------------------------------------------------------------

let browser;

before(async () => {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing (scripts/setup-test-deps.sh installs it)`);
  // Playwright gives the browser a fresh, temporary user data dir; each test
  // opens its own context (cookies, localStorage) in it.
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: 120000,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  // Screenshots of this run only.
  fs.mkdirSync(SHOTS, { recursive: true });
  for (const f of fs.readdirSync(SHOTS)) if (f.endsWith('.png')) fs.rmSync(path.join(SHOTS, f));
});

after(async () => {
  await browser?.close();
});

/** The contexts the running test opened (uiTest closes them). */
let opened = [];

/**
 * A fresh browser context (its own cookies and localStorage) with one page
 * whose console errors and uncaught errors are collected in `errors`; the
 * window is 1280x900 unless `viewport` says otherwise.
 */
async function open({ login = true, vhost, viewport = { width: 1280, height: 900 } } = {}) {
  const context = await browser.newContext({ viewport, baseURL: BASE });
  context.setDefaultTimeout(WAIT_MS);
  context.setDefaultNavigationTimeout(WAIT_MS);
  // The header's vhost choice (kept in localStorage) scopes the listings.
  if (vhost) await context.addInitScript((v) => localStorage.setItem('vhost', v), vhost);
  if (login) {
    // The cookie the login page sets: base64 "user:password", URL-encoded.
    const value = enc(Buffer.from(`${USER}:${PASS}`).toString('base64'));
    await context.addCookies([{ name: 'm', value, url: BASE, sameSite: 'Strict' }]);
  }
  const page = await context.newPage();
  const errors = watch(page);
  opened.push({ context, page });
  return { context, page, errors };
}

/**
 * A test of the UI: when it fails, each of its pages still open is saved as
 * target/ui-screenshots/failed-<test>-<n>.png; its contexts are closed after.
 */
function uiTest(name, fn, { skip = false } = {}) {
  test(name, { timeout: TEST_TIMEOUT_MS, skip }, async () => {
    opened = [];
    try {
      await fn();
    } catch (e) {
      const slug = name.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').slice(0, 40);
      let n = 0;
      for (const { page } of opened) {
        if (page.isClosed()) continue;
        await page.screenshot({ path: path.join(SHOTS, `failed-${slug}-${++n}.png`), fullPage: true }).catch(() => undefined);
      }
      throw e;
    } finally {
      for (const { context } of opened) await context.close().catch(() => undefined);
      opened = [];
    }
  });
}

/** Collects the console errors and uncaught errors of `page`. */
function watch(page) {
  const errors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()} (${m.location()?.url || page.url()})`);
  });
  page.on('pageerror', (e) => errors.push(`uncaught: ${e.message} (${page.url()})`));
  return errors;
}

/** Only the uncaught errors of `errors` (console errors can be expected). */
const uncaught = (errors) => errors.filter((e) => e.startsWith('uncaught'));

const byTestId = (page, id) => page.getByTestId(id);

/** Waits for the toast to say `text` (a string it includes, or a RegExp). */
async function expectToast(page, text) {
  const toast = byTestId(page, 'toast');
  const banner = byTestId(page, 'error-banner');
  await eventually(async () => {
    if (await banner.isVisible()) assert.fail(`error banner instead of toast "${text}": ${await byTestId(page, 'error-text').textContent()}`);
    if (!(await toast.isVisible())) return false;
    const t = await toast.textContent();
    return typeof text === 'string' ? t.includes(text) : text.test(t);
  }, `toast "${text}"`);
}

/** Fails when the error banner shows. */
async function expectNoErrorBanner(page) {
  const banner = byTestId(page, 'error-banner');
  if (await banner.isVisible()) assert.fail(`error banner: ${await byTestId(page, 'error-text').textContent()}`);
}

/** Waits for the error banner and returns its text. */
async function errorBannerText(page) {
  await byTestId(page, 'error-banner').waitFor({ state: 'visible' });
  return (await byTestId(page, 'error-text').textContent()).trim();
}

/** Opens a collapsed <details> panel. */
async function openPanel(page, id) {
  const details = page.locator(`#${id}`);
  if (!(await details.evaluate((d) => d.open))) await details.locator('summary').click();
}

/** Selects `value` in a <select> once the page has filled it with that option. */
async function selectWhenFilled(page, testid, value) {
  const select = byTestId(page, testid);
  await eventually(() => select.evaluate((s, v) => [...s.options].some((o) => o.value === v), value), `option "${value}" in ${testid}`);
  await select.selectOption(value);
}

/** Confirms the confirm dialog. */
async function confirm(page) {
  const dialog = byTestId(page, 'confirm-dialog');
  await dialog.waitFor({ state: 'visible' });
  await byTestId(page, 'confirm-ok').click();
}

/** Waits for a paged table to have loaded (and its body to hold `text`, when given). */
async function tableLoaded(page, id, text) {
  await page.locator(`#${id}[data-loaded="true"]`).waitFor();
  if (text !== undefined) await page.locator(`#${id} tbody`).getByText(text, { exact: true }).first().waitFor();
}

/** The rows of table `id`, each as an object of its cells' text by column header. */
async function tableRows(page, id) {
  return page.locator(`#${id}`).evaluate((t) => {
    const heads = [...t.querySelectorAll('thead th')].map((th) => th.textContent.trim());
    return [...t.querySelectorAll('tbody tr:not(.empty)')].map((tr) =>
      Object.fromEntries([...tr.children].map((td, i) => [heads[i], td.textContent.trim()])),
    );
  });
}

/** Waits for a row of table `id` whose cells (by column header) are those of `expected`. */
async function expectRow(page, id, expected) {
  let rows = [];
  const matches = (r) => Object.entries(expected).every(([k, v]) => r[k] === v);
  try {
    await eventually(async () => {
      rows = await tableRows(page, id);
      return rows.some(matches);
    }, `a row ${JSON.stringify(expected)} in #${id}`);
  } catch (e) {
    assert.fail(`${e.message}; the rows: ${JSON.stringify(rows)}`);
  }
}

/**
 * Types `name` into a paged table's filter (whatever else the broker holds,
 * the row is then on the first page) and waits for its row.
 */
async function findRow(page, id, name) {
  await page.locator(`#${id}[data-loaded="true"]`).waitFor();
  await byTestId(page, `${id}-filter`).fill(name);
  await page.locator(`#${id} tbody`).getByText(name, { exact: true }).first().waitFor();
}

// --- the tests ---------------------------------------------------------------

describe('management UI', () => {
  uiTest('login: a wrong password is shown on the login page, logout returns to it', async () => {
    const { page, errors } = await open({ login: false });
    // Without the cookie any page sends the browser to the login page.
    await page.goto('/queues');
    await page.waitForURL((u) => u.pathname === '/login');
    assert.equal(new URL(page.url()).searchParams.get('next'), '/queues');

    await byTestId(page, 'login-username').fill(USER);
    await byTestId(page, 'login-password').fill(`${PASS}-wrong`);
    await byTestId(page, 'login-submit').click();
    const text = await errorBannerText(page);
    assert.ok(text.length > 0, 'the error banner says why');
    assert.equal(new URL(page.url()).pathname, '/login');
    // The reason the API gives is what the user sees.
    const wrong = await fetch(`${BASE}/api/whoami`, {
      headers: { Authorization: 'Basic ' + Buffer.from(`${USER}:${PASS}-wrong`).toString('base64') },
    });
    assert.equal(wrong.status, 401);
    const reason = (await wrong.json().catch(() => ({}))).reason;
    if (reason) assert.ok(text.includes(reason), `banner "${text}" shows the API's reason "${reason}"`);

    await byTestId(page, 'login-password').fill(PASS);
    await byTestId(page, 'login-submit').click();
    // Back to the page asked for.
    await page.waitForURL((u) => u.pathname === '/queues');
    await tableLoaded(page, 'queues-table');
    assert.equal(await byTestId(page, 'username').textContent(), USER);
    await expectNoErrorBanner(page);

    await byTestId(page, 'logout').click();
    await page.waitForURL((u) => u.pathname === '/login');
    await page.goto('/');
    await page.waitForURL((u) => u.pathname === '/login');
    assert.deepEqual(uncaught(errors), []);
  });

  uiTest('single sign-on: the identity provider logs the user in, logout ends the session', async () => {
    const { context, page, errors } = await open({ login: false });
    await page.goto('/queues');
    await page.waitForURL((u) => u.pathname === '/login');
    await byTestId(page, 'sso-login').waitFor({ state: 'visible' });
    await page.screenshot({ path: path.join(SHOTS, 'login-sso.png') });
    await byTestId(page, 'sso-login').click();
    // The provider's sign-in page, then back to the UI, signed on.
    await page.waitForURL((u) => u.href.startsWith(`${OIDC_ISSUER}/authorize?`));
    await byTestId(page, 'idp-username').fill('sso-admin');
    await byTestId(page, 'idp-sign-in').click();
    await page.waitForURL((u) => u.origin === new URL(BASE).origin && u.pathname === '/');
    await eventually(async () => (await byTestId(page, 'username').textContent()) === 'sso-admin', 'the signed-on user in the header');
    const cookies = await context.cookies(BASE);
    const token = cookies.find((c) => c.name === 'oauth_token');
    assert.ok(token && token.httpOnly, 'the token is kept in an HttpOnly cookie');
    // The API answers the session: a listing loads without an error.
    await page.goto('/queues');
    await tableLoaded(page, 'queues-table');
    await expectNoErrorBanner(page);
    assert.equal((await apiOk('GET', '/api/whoami')).name, USER, 'the password user is unaffected');

    await byTestId(page, 'logout').click();
    await page.waitForURL((u) => u.pathname === '/login');
    assert.equal((await context.cookies(BASE)).find((c) => c.name === 'oauth_token'), undefined, 'logout drops the token');
    await page.goto('/');
    await page.waitForURL((u) => u.pathname === '/login');

    // A callback the broker did not start ends on the login page, saying why.
    await page.goto('/oauth/callback?code=forged&state=forged');
    await page.waitForURL((u) => u.pathname === '/login');
    assert.match(await errorBannerText(page), /Missing OAuth state/);
    assert.deepEqual(uncaught(errors), []);
  }, { skip: !OIDC_ISSUER && 'no OIDC_ISSUER: the broker has no identity provider' });

  uiTest('create a vhost, user, permission, queue and policy; publish, get, delete', async () => {
    const id = suffix();
    const vhost = `ui-e2e-vhost-${id}`;
    const user = `ui-e2e-user-${id}`;
    const queue = `ui-e2e-queue-${id}`;
    const policy = `ui-e2e-policy-${id}`;
    const payload = `hello from the UI ${id}`;
    const { page, errors } = await open({ login: false });
    try {
      // A real login through the form.
      await page.goto('/login');
      await byTestId(page, 'login-username').fill(USER);
      await byTestId(page, 'login-password').fill(PASS);
      await byTestId(page, 'login-submit').click();
      await page.waitForURL((u) => u.pathname === '/');

      // Virtual host.
      await page.goto('/vhosts');
      await tableLoaded(page, 'vhosts-table');
      await openPanel(page, 'add-vhost-panel');
      await byTestId(page, 'add-vhost-name').fill(vhost);
      await byTestId(page, 'add-vhost-description').fill('made by the UI tests');
      await byTestId(page, 'add-vhost-submit').click();
      await expectToast(page, `Virtual host ${vhost} added`);
      await findRow(page, 'vhosts-table', vhost);
      assert.equal((await api('GET', `/api/vhosts/${enc(vhost)}`)).status, 200);

      // Our own permission on it, from the vhost's page.
      await page.goto(`/vhost?name=${enc(vhost)}`);
      await byTestId(page, 'vhost-details-list').waitFor();
      await page.locator('#vhost-permissions-table').waitFor();
      await selectWhenFilled(page, 'set-permission-user', USER);
      await byTestId(page, 'set-permission-submit').click();
      await expectToast(page, 'Permission set');
      await page.locator('#vhost-permissions-table tbody').getByText(USER, { exact: true }).waitFor();

      // User.
      await page.goto('/users');
      await tableLoaded(page, 'users-table');
      await openPanel(page, 'add-user-panel');
      await byTestId(page, 'add-user-name').fill(user);
      await byTestId(page, 'add-user-password').fill(`pw-${id}`);
      await byTestId(page, 'add-user-tags').fill('management');
      await byTestId(page, 'add-user-submit').click();
      await expectToast(page, `User ${user} added`);
      await findRow(page, 'users-table', user);
      assert.equal((await api('GET', `/api/users/${enc(user)}`)).status, 200);

      // Permission on the vhost, from the user's page.
      await page.goto(`/user?name=${enc(user)}`);
      await page.locator('#user-permissions-table').waitFor();
      await selectWhenFilled(page, 'set-permission-vhost', vhost);
      await byTestId(page, 'set-permission-submit').click();
      await expectToast(page, 'Permission set');
      await page.locator('#user-permissions-table tbody').getByText(vhost, { exact: true }).waitFor();
      const perm = await apiOk('GET', `/api/permissions/${enc(vhost)}/${enc(user)}`);
      assert.equal(perm.configure, '.*');

      // A topic permission on amq.topic in the vhost, then cleared.
      await page.locator('#user-topic-permissions-table').waitFor();
      await selectWhenFilled(page, 'set-topic-permission-vhost', vhost);
      await byTestId(page, 'set-topic-permission-write').fill('^{username}\\.');
      await byTestId(page, 'set-topic-permission-submit').click();
      await expectToast(page, 'Topic permission set');
      await page.locator('#user-topic-permissions-table tbody').getByText('amq.topic', { exact: true }).waitFor();
      const topicPerms = await apiOk('GET', `/api/topic-permissions/${enc(vhost)}/${enc(user)}`);
      assert.deepEqual(
        topicPerms.map((p) => [p.exchange, p.write, p.read]),
        [['amq.topic', '^{username}\\.', '.*']],
      );
      await byTestId(page, 'clear-topic-permission').click();
      await confirm(page);
      await expectToast(page, 'Permission cleared');
      await page.locator('#user-topic-permissions-table tbody').getByText('No topic permissions').waitFor();

      // Queue in the vhost.
      await page.goto('/queues');
      await tableLoaded(page, 'queues-table');
      await openPanel(page, 'declare-queue-panel');
      await selectWhenFilled(page, 'declare-queue-vhost', vhost);
      await byTestId(page, 'declare-queue-name').fill(queue);
      await byTestId(page, 'declare-queue-submit').click();
      await expectToast(page, `Queue ${queue} added`);
      await findRow(page, 'queues-table', queue);
      const q = await apiOk('GET', `/api/queues/${enc(vhost)}/${enc(queue)}`);
      assert.equal(q.durable, true);

      // Bind it to amq.direct and publish there, from the exchange's page.
      await page.goto(`/exchange?vhost=${enc(vhost)}&name=amq.direct`);
      await page.locator('#exchange-bindings-source-table').waitFor();
      await byTestId(page, 'bind-exchange-destination').fill(queue);
      await byTestId(page, 'bind-exchange-routing-key').fill(queue);
      await byTestId(page, 'bind-exchange-submit').click();
      await expectToast(page, 'Binding added');
      await page.locator('#exchange-bindings-source-table tbody').getByRole('link', { name: queue, exact: true }).waitFor();
      await openPanel(page, 'publish-panel');
      await byTestId(page, 'publish-routing-key').fill(queue);
      await byTestId(page, 'publish-payload').fill(payload);
      await byTestId(page, 'publish-submit').click();
      await expectToast(page, /^Message published$/);
      await expectNoErrorBanner(page);

      // Get it from the queue's page, acknowledging it.
      await page.goto(`/queue?vhost=${enc(vhost)}&name=${enc(queue)}`);
      await byTestId(page, 'queue-details-list').waitFor();
      await openPanel(page, 'get-panel');
      await byTestId(page, 'get-messages-ackmode').selectOption('ack_requeue_false');
      await byTestId(page, 'get-messages-submit').click();
      await expectToast(page, '1 message(s)');
      assert.equal((await byTestId(page, 'message-payload').textContent()).trim(), payload);
      await eventually(async () => {
        const r = await apiOk('GET', `/api/queues/${enc(vhost)}/${enc(queue)}`);
        return r.messages === 0;
      }, 'the queue to be empty after an acknowledged get');

      // A policy on the queue.
      await page.goto('/policies');
      await tableLoaded(page, 'policies-table');
      await selectWhenFilled(page, 'policy-vhost', vhost);
      await byTestId(page, 'policy-name').fill(policy);
      await byTestId(page, 'policy-pattern').fill(`^${queue}$`);
      await byTestId(page, 'policy-apply-to').selectOption('queues');
      await byTestId(page, 'policy-definition').fill('{"max-length": 100}');
      await byTestId(page, 'policy-submit').click();
      await expectToast(page, `Policy ${policy} saved`);
      await findRow(page, 'policies-table', policy);
      await eventually(async () => {
        const r = await apiOk('GET', `/api/queues/${enc(vhost)}/${enc(queue)}`);
        return r.policy === policy;
      }, 'the policy to apply to the queue');

      // Delete the queue, the user and the vhost from their pages.
      await page.goto(`/queue?vhost=${enc(vhost)}&name=${enc(queue)}`);
      await byTestId(page, 'queue-details-list').waitFor();
      await byTestId(page, 'queue-delete').click();
      await confirm(page);
      await page.waitForURL((u) => u.pathname === '/queues');
      assert.equal((await api('GET', `/api/queues/${enc(vhost)}/${enc(queue)}`)).status, 404);

      await page.goto(`/user?name=${enc(user)}`);
      await byTestId(page, 'user-details-list').waitFor();
      await byTestId(page, 'user-delete').click();
      await confirm(page);
      await page.waitForURL((u) => u.pathname === '/users');
      assert.equal((await api('GET', `/api/users/${enc(user)}`)).status, 404);

      await page.goto(`/vhost?name=${enc(vhost)}`);
      await byTestId(page, 'vhost-details-list').waitFor();
      await byTestId(page, 'vhost-delete').click();
      await confirm(page);
      await page.waitForURL((u) => u.pathname === '/vhosts');
      assert.equal((await api('GET', `/api/vhosts/${enc(vhost)}`)).status, 404);
      assert.equal((await api('GET', `/api/policies/${enc(vhost)}/${enc(policy)}`)).status, 404);
      await byTestId(page, 'vhosts-table-filter').fill(vhost);
      await page.locator('#vhosts-table tbody tr.empty').waitFor();
      assert.equal(await page.locator('#vhosts-table tbody').getByText(vhost, { exact: true }).count(), 0);
      assert.deepEqual(uncaught(errors), []);
    } finally {
      await apiDelete(`/api/users/${enc(user)}`);
      await apiDelete(`/api/vhosts/${enc(vhost)}`);
    }
  });

  uiTest('the overview chart moves while messages flow', async () => {
    const queue = `ui-e2e-rates-${suffix()}`;
    await apiOk('PUT', `/api/queues/%2F/${enc(queue)}`, { durable: false, arguments: { 'x-max-length': 1000 } });
    const { page, errors } = await open();
    let publishing = true;
    let published = 0;
    const publisher = (async () => {
      while (publishing) {
        await apiOk('POST', '/api/exchanges/%2F/amq.default/publish', {
          routing_key: queue,
          payload: `tick ${published}`,
          payload_encoding: 'string',
          properties: {},
        });
        published++;
        await sleep(20);
      }
    })();
    try {
      await page.goto('/');
      const chart = byTestId(page, 'message-rates-chart');
      const points = async () => Number(await chart.getAttribute('data-points'));
      await eventually(async () => (await points()) >= 1, 'the first sample of the rates chart');
      const firstPoints = await points();
      // The chart gains samples, and the publish rate (its first series) and
      // the queued-message totals leave zero while the publisher runs.
      await eventually(async () => (await points()) > firstPoints, 'the rates chart to gain samples', LONG_WAIT_MS);
      await eventually(async () => {
        const last = JSON.parse((await chart.getAttribute('data-last')) || '[]');
        return last[0] > 0;
      }, 'a publish rate above zero in the rates chart', LONG_WAIT_MS);
      await eventually(async () => {
        const last = JSON.parse((await byTestId(page, 'queue-totals-chart').getAttribute('data-last')) || '[]');
        return last[0] > 0;
      }, 'queued messages in the queued-messages chart', LONG_WAIT_MS);
      await eventually(async () => {
        const t = (await byTestId(page, 'total-messages').textContent()).replace(/,/g, '');
        return Number(t) > 0;
      }, 'the total of messages to count the published ones', LONG_WAIT_MS);
      assert.ok(published > 0);
      await expectNoErrorBanner(page);
      assert.deepEqual(errors, []);
    } finally {
      publishing = false;
      await publisher.catch((e) => console.error(`publisher: ${e.message}`));
      await apiDelete(`/api/queues/%2F/${enc(queue)}`);
    }
  });

  uiTest('the queue page\'s charts fit a narrow window: inside the page, legend entries apart', async () => {
    const queue = `ui-e2e-narrow-${suffix()}`;
    await apiOk('PUT', `/api/queues/%2F/${enc(queue)}`, { durable: false });
    try {
      for (const width of [360, 480, 600]) {
        const { page, errors } = await open({ viewport: { width, height: 800 } });
        await page.goto(`/queue?vhost=%2F&name=${enc(queue)}`);
        for (const id of ['queue-messages-chart', 'queue-rates-chart']) {
          await page.locator(`[data-testid="${id}"]:not([data-points="0"])`).waitFor();
          // The legend's values as wide as a busy queue's, then the boxes of
          // the chart, its plot and every legend entry.
          const layout = await byTestId(page, id).evaluate((c) => {
            for (const v of c.querySelectorAll('.u-legend .u-value')) v.textContent = '123456.7/s';
            const box = (e) => {
              const r = e.getBoundingClientRect();
              return { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
            };
            return {
              page: document.documentElement.clientWidth,
              chart: box(c),
              plot: box(c.querySelector('.uplot')),
              entries: [...c.querySelectorAll('.u-legend .u-series')].map((e) => ({ text: e.textContent, ...box(e) })),
            };
          });
          const where = `${id} at ${width} px`;
          assert.ok(layout.entries.length >= 3, `the time and the series in the legend of ${where}`);
          assert.ok(layout.chart.left >= 0 && layout.chart.right <= layout.page + 1, `${where}: the chart (${JSON.stringify(layout.chart)}) inside the page (${layout.page} px)`);
          assert.ok(layout.plot.right <= layout.chart.right + 1, `${where}: the plot (${layout.plot.right}) ends inside its panel (${layout.chart.right})`);
          for (const [i, a] of layout.entries.entries()) {
            assert.ok(a.left >= layout.chart.left - 1 && a.right <= layout.chart.right + 1, `${where}: legend entry "${a.text}" outside the chart: ${JSON.stringify(a)}`);
            for (const b of layout.entries.slice(i + 1)) {
              const apart = a.right <= b.left + 1 || b.right <= a.left + 1 || a.bottom <= b.top + 1 || b.bottom <= a.top + 1;
              assert.ok(apart, `${where}: legend entries "${a.text}" and "${b.text}" overlap: ${JSON.stringify([a, b])}`);
            }
          }
        }
        await page.screenshot({ path: path.join(SHOTS, `queue-${width}px.png`), fullPage: true });
        assert.deepEqual(uncaught(errors), []);
      }
    } finally {
      await apiDelete(`/api/queues/%2F/${enc(queue)}`);
    }
  });

  uiTest('super streams from the queues page: by partition count and by binding keys', async () => {
    const name = `ui-e2e-super-${suffix()}`;
    const keyed = `${name}-k`;
    const { page, errors } = await open();
    try {
      await page.goto('/queues');
      await tableLoaded(page, 'queues-table');
      await openPanel(page, 'add-super-stream-panel');
      await selectWhenFilled(page, 'add-super-stream-vhost', '/');
      await byTestId(page, 'add-super-stream-name').fill(name);
      await byTestId(page, 'add-super-stream-partitions').fill('2');
      await byTestId(page, 'add-super-stream-max-age').fill('1D');
      await byTestId(page, 'add-super-stream-submit').click();
      await expectToast(page, `Super stream ${name} added`);
      await findRow(page, 'queues-table', `${name}-1`);
      const p0 = await apiOk('GET', `/api/queues/%2F/${enc(name)}-0`);
      assert.equal(p0.type, 'stream');
      assert.equal(p0.arguments['x-max-age'], '1D');
      const bound = await apiOk('GET', `/api/exchanges/%2F/${enc(name)}/bindings/source`);
      assert.deepEqual(bound.map((b) => [b.destination, b.routing_key]).sort(), [[`${name}-0`, '0'], [`${name}-1`, '1']]);

      await selectWhenFilled(page, 'add-super-stream-vhost', '/');
      await byTestId(page, 'add-super-stream-name').fill(keyed);
      await byTestId(page, 'add-super-stream-keys').fill('amer, emea');
      await byTestId(page, 'add-super-stream-submit').click();
      await expectToast(page, `Super stream ${keyed} added`);
      await findRow(page, 'queues-table', `${keyed}-emea`);
      const keys = await apiOk('GET', `/api/exchanges/%2F/${enc(keyed)}/bindings/source`);
      assert.deepEqual(keys.map((b) => b.routing_key).sort(), ['amer', 'emea']);
      await expectNoErrorBanner(page);
      assert.deepEqual(uncaught(errors), []);
    } finally {
      for (const q of [`${name}-0`, `${name}-1`, `${keyed}-amer`, `${keyed}-emea`]) {
        await apiDelete(`/api/queues/%2F/${enc(q)}`);
      }
      for (const x of [name, keyed]) await apiDelete(`/api/exchanges/%2F/${enc(x)}`);
    }
  });

  uiTest('stream connections: the list, a connection with its publisher and consumer, closing it', async () => {
    const id = suffix();
    const stream = `ui-e2e-stream-${id}`;
    const clientName = `ui-e2e-stream-client-${id}`;
    const reference = `ui-e2e-ref-${id}`;
    let client;
    try {
      await apiOk('PUT', `/api/queues/%2F/${enc(stream)}`, { durable: true, arguments: { 'x-queue-type': 'stream' } });
      // One connection: publisher 7 publishes three messages, all confirmed,
      // and subscription 3 reads them from the first offset.
      client = await StreamClient.connect(await streamPort(), { connection_name: clientName });
      await client.declarePublisher(7, reference, stream);
      client.publish(7, ['one', 'two', 'three']);
      await eventually(() => client.confirmed === 3, 'the three messages confirmed');
      await client.subscribe(3, stream, 10);
      const conn = await eventually(async () => {
        const list = await apiOk('GET', '/api/stream/connections');
        return list.find((c) => c.user_provided_name === clientName);
      }, 'the stream connection in the API');
      const P = `/api/stream/connections/%2F/${enc(conn.name)}`;
      const consumer = await eventually(async () => {
        const [c] = await apiOk('GET', `${P}/consumers`);
        return c?.consumed === 3 && c;
      }, 'the consumer to have the three messages');
      const [publisher] = await apiOk('GET', `${P}/publishers`);
      assert.equal(publisher.published, 3);

      // The list: the connection, its client and its counts; its name links to its page.
      const { page, errors } = await open();
      await page.goto('/stream-connections');
      assert.equal(await page.locator('#nav a[aria-current="page"]').textContent(), 'Stream connections');
      await findRow(page, 'stream-connections-table', conn.name);
      await expectRow(page, 'stream-connections-table', {
        Name: conn.name,
        'Client name': clientName,
        'Virtual host': '/',
        User: USER,
        Client: `${conn.peer_host}:${conn.peer_port}`,
        Publishers: '1',
        Consumers: '1',
      });
      await page.locator('#stream-connections-table tbody').getByRole('link', { name: conn.name, exact: true }).click();
      await page.waitForURL((u) => u.pathname === '/stream-connection' && u.searchParams.get('name') === conn.name);

      // The connection's page: details, the publisher's and the consumer's figures.
      assert.equal(await byTestId(page, 'stream-connection-name').textContent(), conn.name);
      const details = byTestId(page, 'stream-connection-details-list');
      await details.getByText(clientName, { exact: true }).waitFor();
      await details.getByText(`${conn.peer_host}:${conn.peer_port}`, { exact: true }).waitFor();
      await tableLoaded(page, 'stream-connection-publishers-table', stream);
      await expectRow(page, 'stream-connection-publishers-table', {
        Stream: stream,
        'Publisher id': '7',
        Reference: reference,
        Published: '3',
        Confirmed: '3',
        Errored: '0',
      });
      await tableLoaded(page, 'stream-connection-consumers-table', stream);
      await expectRow(page, 'stream-connection-consumers-table', {
        Stream: stream,
        'Subscription id': '3',
        Offset: '2',
        'Offset lag': '0',
        Credits: String(consumer.credits),
        Consumed: '3',
        Active: 'yes',
      });
      await expectNoErrorBanner(page);
      await page.screenshot({ path: path.join(SHOTS, 'stream-connection.png'), fullPage: true });

      // The stream's page lists the same publisher and consumer, linked to the connection.
      await page.goto(`/stream?vhost=%2F&name=${enc(stream)}`);
      await expectRow(page, 'stream-publishers-table', { Connection: conn.name, 'Publisher id': '7', Published: '3' });
      await expectRow(page, 'stream-consumers-table', { Connection: conn.name, 'Subscription id': '3', Consumed: '3' });
      await page.locator('#stream-publishers-table tbody').getByRole('link', { name: conn.name, exact: true }).click();
      await page.waitForURL((u) => u.pathname === '/stream-connection' && u.searchParams.get('name') === conn.name);

      // Closing it from its page: the broker drops it, the list no longer has it.
      await byTestId(page, 'close-stream-connection-reason').fill(`closed by ${id}`);
      await byTestId(page, 'close-stream-connection-submit').click();
      await confirm(page);
      await page.waitForURL((u) => u.pathname === '/stream-connections');
      await eventually(async () => (await api('GET', P)).status === 404, 'the connection closed');
      await eventually(() => client.closed, 'the broker to close the socket');
      await byTestId(page, 'stream-connections-table-filter').fill(conn.name);
      await page.locator('#stream-connections-table tbody').getByText('No stream connections').waitFor({ timeout: LONG_WAIT_MS });
      await expectNoErrorBanner(page);
      assert.deepEqual(uncaught(errors), []);
    } finally {
      client?.destroy();
      await apiDelete(`/api/queues/%2F/${enc(stream)}`);
    }
  });

  uiTest('API errors are shown in the error banner', async () => {
    const queue = `ui-e2e-errors-${suffix()}`;
    const missing = `ui-e2e-missing-${suffix()}`;
    await apiOk('PUT', `/api/queues/%2F/${enc(queue)}`, { durable: false });
    const { page, errors } = await open();
    try {
      // An argument the API refuses: the banner has the API's reason.
      await page.goto('/queues');
      await tableLoaded(page, 'queues-table');
      await openPanel(page, 'declare-queue-panel');
      await selectWhenFilled(page, 'declare-queue-vhost', '/');
      const bad = `${queue}-bad`;
      const args = { 'x-max-length': 'not a number' };
      await byTestId(page, 'declare-queue-name').fill(bad);
      await byTestId(page, 'declare-queue-arguments').fill(JSON.stringify(args));
      await byTestId(page, 'declare-queue-submit').click();
      let text = await errorBannerText(page);
      const refused = await api('PUT', `/api/queues/%2F/${enc(bad)}`, { durable: true, auto_delete: false, arguments: args });
      assert.ok(refused.status >= 400 && refused.status < 500, `the API refuses the argument (${refused.status})`);
      assert.ok(refused.body?.reason, 'the API gives a reason');
      assert.ok(text.includes(refused.body.reason), `banner "${text}" shows the API's reason "${refused.body.reason}"`);
      // The banner can be dismissed.
      await byTestId(page, 'error-close').click();
      await byTestId(page, 'error-banner').waitFor({ state: 'hidden' });

      // Arguments that are not JSON are caught before the API is called.
      await byTestId(page, 'declare-queue-arguments').fill('{not json');
      await byTestId(page, 'declare-queue-submit').click();
      text = await errorBannerText(page);
      assert.match(text, /Arguments is not valid JSON/);

      // A binding from an exchange that does not exist, on the queue's page.
      await page.goto(`/queue?vhost=%2F&name=${enc(queue)}`);
      await byTestId(page, 'queue-details-list').waitFor();
      await byTestId(page, 'bind-queue-exchange').fill(missing);
      await byTestId(page, 'bind-queue-routing-key').fill('rk');
      await byTestId(page, 'bind-queue-submit').click();
      text = await errorBannerText(page);
      const missingBind = await api('POST', `/api/bindings/%2F/e/${enc(missing)}/q/${enc(queue)}`, { routing_key: 'rk', arguments: {} });
      assert.ok(missingBind.status >= 400, `the API refuses the binding (${missingBind.status})`);
      assert.ok(text.includes(missingBind.body.reason), `banner "${text}" shows the API's reason "${missingBind.body.reason}"`);

      // A page for a queue that does not exist says so.
      await page.goto(`/queue?vhost=%2F&name=${enc(missing)}`);
      text = await errorBannerText(page);
      assert.ok(text.length > 0);
      assert.deepEqual(uncaught(errors), []);
    } finally {
      await apiDelete(`/api/queues/%2F/${enc(queue)}`);
      await apiDelete(`/api/queues/%2F/${enc(queue)}-bad`);
    }
  });

  uiTest('the live log shows lines, with the time the broker logged them', async () => {
    const { page, errors } = await open();
    const nobody = `ui-e2e-nobody-${suffix()}`;
    await page.goto('/logs');
    await page.getByTestId('log-line').first().waitFor();
    await eventually(async () => (await byTestId(page, 'log-status').textContent()) === 'Live', 'the live log to connect');
    // A failed AMQP login is logged, with the user's name.
    const url = new URL(await amqpUrl('/'));
    url.username = nobody;
    url.password = 'wrong';
    await amqp.connect(url.toString()).then(
      (c) => c.close().then(() => assert.fail('a login with an unknown user succeeded')),
      () => undefined,
    );
    const line = page.getByTestId('log-line').filter({ hasText: nobody }).first();
    await line.waitFor({ timeout: LONG_WAIT_MS });
    // The time shown is the line's own (its event id), not when the browser got it.
    const { id, text, shown } = await line.evaluate((l) => {
      const d = new Date(Number(l.dataset.id));
      return { id: l.dataset.id, text: l.textContent, shown: d.toLocaleTimeString() };
    });
    assert.match(id, /^\d+$/);
    assert.ok(text.includes(shown), `"${text}" shows the time of event id ${id} (${shown})`);
    assert.ok(Math.abs(Number(id) - Date.now()) < 10 * 60 * 1000, 'the event id is a time in milliseconds');
    await expectNoErrorBanner(page);
    assert.deepEqual(errors, []);
  });

  uiTest('shovels and federation upstreams from their pages; "Move messages" on the queue page', async () => {
    const id = suffix();
    const vhost = `ui-e2e-shovel-${id}`;
    const V = enc(vhost);
    const local = `amqp:///${V}`;
    const messages = async (q) => (await apiOk('GET', `/api/queues/${V}/${q}`)).messages;
    const publish = async (q, n) => {
      for (let i = 0; i < n; i++) {
        await apiOk('POST', `/api/exchanges/${V}/amq.default/publish`, { routing_key: q, payload: `m${i}`, payload_encoding: 'string', properties: { delivery_mode: 2 } });
      }
    };
    try {
      await apiOk('PUT', `/api/vhosts/${V}`, {});
      await apiOk('PUT', `/api/permissions/${V}/${enc(USER)}`, { configure: '.*', write: '.*', read: '.*' });
      for (const q of ['src', 'dst', 'moved']) await apiOk('PUT', `/api/queues/${V}/${q}`, { durable: true });
      await publish('src', 3);
      const { page, errors } = await open({ vhost });

      // A shovel added with the form runs, moves the messages, pauses and is deleted.
      await page.goto('/shovels');
      await selectWhenFilled(page, 'shovel-vhost', vhost);
      await byTestId(page, 'shovel-name').fill('ui-shovel');
      await byTestId(page, 'shovel-src-uri').fill(local);
      await byTestId(page, 'shovel-src').fill('src');
      await byTestId(page, 'shovel-dest-uri').fill(local);
      await byTestId(page, 'shovel-dest').fill('dst');
      await byTestId(page, 'shovel-submit').click();
      await expectToast(page, 'Shovel ui-shovel added');
      const state = (s) => page.locator('[data-testid="shovel-state"][data-name="ui-shovel"]', { hasText: s });
      await state('running').waitFor({ timeout: LONG_WAIT_MS });
      await eventually(async () => (await messages('dst')) === 3, 'the shovel moved the messages', LONG_WAIT_MS);
      await page.locator('[data-testid="pause-shovel"][data-name="ui-shovel"]').click();
      await expectToast(page, 'Shovel ui-shovel paused');
      await state('paused').waitFor();
      await page.locator('[data-testid="delete-shovel"][data-name="ui-shovel"]').click();
      await confirm(page);
      await expectToast(page, 'Shovel ui-shovel deleted');
      await eventually(async () => (await api('GET', `/api/shovels/${V}/ui-shovel`)).status === 404, 'the shovel gone');

      // An upstream saved with the form; a policy makes a link of it.
      await page.goto('/federation');
      await selectWhenFilled(page, 'upstream-vhost', vhost);
      await byTestId(page, 'upstream-name').fill('ui-upstream');
      const uris = 'amqp://127.0.0.1:1 amqp://127.0.0.1:2';
      await byTestId(page, 'upstream-uri').fill(uris);
      await byTestId(page, 'upstream-max-hops').fill('2');
      await byTestId(page, 'upstream-submit').click();
      await expectToast(page, 'Upstream ui-upstream saved');
      await tableLoaded(page, 'upstreams-table', 'ui-upstream');
      const saved = await apiOk('GET', `/api/parameters/federation-upstream/${V}/ui-upstream`);
      assert.deepEqual(saved.value, { uri: uris.split(' '), 'ack-mode': 'on-confirm', 'max-hops': 2 });
      // Edit fills the form with what is stored, every URI included.
      await page.locator('[data-testid="edit-upstream"][data-name="ui-upstream"]').click();
      assert.equal(await byTestId(page, 'upstream-uri').inputValue(), uris);
      assert.equal(await byTestId(page, 'upstream-max-hops').inputValue(), '2');
      await apiOk('PUT', `/api/exchanges/${V}/fed-x`, { type: 'topic', durable: true });
      await apiOk('PUT', `/api/policies/${V}/fed`, { pattern: '^fed-x$', 'apply-to': 'exchanges', definition: { 'federation-upstream-set': 'all' } });
      await page.locator('#links-table tbody').getByText('fed-x', { exact: true }).waitFor({ timeout: LONG_WAIT_MS });
      await page.locator('[data-testid="delete-upstream"][data-name="ui-upstream"]').click();
      await confirm(page);
      await expectToast(page, 'Upstream ui-upstream deleted');

      // "Move messages": a one-off shovel that empties the queue and goes away.
      await publish('src', 2);
      await page.goto(`/queue?vhost=${V}&name=src`);
      await openPanel(page, 'move-panel');
      await byTestId(page, 'move-queue').fill('moved');
      await byTestId(page, 'move-submit').click();
      await expectToast(page, 'Moving the messages to moved');
      await eventually(async () => (await messages('moved')) === 2, 'the messages moved', LONG_WAIT_MS);
      await eventually(async () => (await messages('src')) === 0, 'the source queue emptied', LONG_WAIT_MS);
      await eventually(async () => (await api('GET', `/api/shovels/${V}/${enc('Move from src')}`)).status === 404, 'the move shovel deleted itself', LONG_WAIT_MS);
      assert.deepEqual(uncaught(errors), []);
    } finally {
      await apiDelete(`/api/vhosts/${V}`);
    }
  });

  uiTest('every page renders without errors (screenshots in target/ui-screenshots)', async () => {
    const id = suffix();
    const vhost = `ui-e2e-shots-${id}`;
    const user = `ui-e2e-shots-user-${id}`;
    const queue = `ui-e2e-shots-queue-${id}`;
    const stream = `ui-e2e-shots-stream-${id}`;
    const exchange = `ui-e2e-shots-exchange-${id}`;
    const V = enc(vhost);
    let conn;
    try {
      // Something on every page: a vhost with a queue, a stream, an exchange
      // bound to the queue, messages, policies, a user, and an AMQP connection
      // with a consumer.
      await apiOk('PUT', `/api/vhosts/${V}`, { description: 'screenshots', tags: 'ui-e2e' });
      await apiOk('PUT', `/api/permissions/${V}/${enc(USER)}`, { configure: '.*', write: '.*', read: '.*' });
      await apiOk('PUT', `/api/users/${enc(user)}`, { password: `pw-${id}`, tags: 'monitoring' });
      await apiOk('PUT', `/api/permissions/${V}/${enc(user)}`, { configure: '.*', write: '.*', read: '.*' });
      await apiOk('PUT', `/api/queues/${V}/${enc(queue)}`, { durable: true, arguments: { 'x-max-length': 1000 } });
      await apiOk('PUT', `/api/queues/${V}/${enc(stream)}`, { durable: true, arguments: { 'x-queue-type': 'stream' } });
      await apiOk('PUT', `/api/exchanges/${V}/${enc(exchange)}`, { type: 'topic', durable: true });
      await apiOk('POST', `/api/bindings/${V}/e/${enc(exchange)}/q/${enc(queue)}`, { routing_key: '#', arguments: {} });
      await apiOk('PUT', `/api/policies/${V}/ui-e2e-shots-policy`, { pattern: '^ui-e2e-shots-queue', 'apply-to': 'queues', priority: 1, definition: { 'message-ttl': 600000 } });
      await apiOk('PUT', `/api/operator-policies/${V}/ui-e2e-shots-op-policy`, { pattern: '.*', 'apply-to': 'queues', priority: 0, definition: { 'max-length': 100000 } });
      await apiOk('PUT', `/api/vhost-limits/${V}/max-queues`, { value: 100 });
      for (let i = 0; i < 3; i++) {
        await apiOk('POST', `/api/exchanges/${V}/${enc(exchange)}/publish`, { routing_key: `k.${i}`, payload: `message ${i}`, payload_encoding: 'string', properties: {} });
        await apiOk('POST', `/api/exchanges/${V}/amq.default/publish`, { routing_key: stream, payload: `stream message ${i}`, payload_encoding: 'string', properties: {} });
      }
      conn = await amqp.connect(await amqpUrl(vhost), { clientProperties: { connection_name: `ui-e2e-${id}` } });
      const ch = await conn.createChannel();
      await ch.prefetch(1);
      await ch.consume(queue, () => undefined, { noAck: false, consumerTag: `ui-e2e-consumer-${id}` });
      const c = await eventually(async () => {
        const list = await apiOk('GET', `/api/vhosts/${V}/connections`);
        const items = Array.isArray(list) ? list : list.items;
        return items.length ? items[0] : null;
      }, 'the AMQP connection in the API');
      const channel = await eventually(async () => {
        const list = await apiOk('GET', `/api/connections/${enc(c.name)}/channels`);
        const items = Array.isArray(list) ? list : list.items;
        return items.length ? items[0] : null;
      }, 'the channel in the API');

      // [screenshot name, URL, what shows the page has loaded, action before
      // the shot, more selectors that must be there]
      const pages = [
        ['login', '/login', '#login-form'],
        ['overview', '/', '[data-testid="message-rates-chart"]:not([data-points="0"])', null, '#listeners-table', '[data-testid="node-props"]'],
        ['queues', '/queues', '#queues-table[data-loaded="true"]', null, `#queues-table tbody >> text=${queue}`],
        ['queue', `/queue?vhost=${V}&name=${enc(queue)}`, '[data-testid="queue-details-list"]', null, '#queue-bindings-table'],
        ['stream', `/stream?vhost=${V}&name=${enc(stream)}`, '#stream-read-form', async (page) => {
          await byTestId(page, 'stream-read-submit').click();
          await byTestId(page, 'message-payload').first().waitFor();
        }],
        ['exchanges', '/exchanges', '#exchanges-table[data-loaded="true"]', null, `#exchanges-table tbody >> text=${exchange}`],
        ['exchange', `/exchange?vhost=${V}&name=${enc(exchange)}`, '[data-testid="exchange-details-list"]', null, '#exchange-bindings-source-table'],
        ['connections', '/connections', '#connections-table[data-loaded="true"]', null, `#connections-table tbody >> text=${c.name}`],
        ['connection', `/connection?name=${enc(c.name)}`, '[data-testid="connection-details-list"]', null, '#connection-channels-table[data-loaded="true"]'],
        ['stream-connections', '/stream-connections', '#stream-connections-table[data-loaded="true"]'],
        ['channels', '/channels', '#channels-table[data-loaded="true"]', null, `#channels-table tbody >> text=${channel.name}`],
        ['channel', `/channel?name=${enc(channel.name)}`, '[data-testid="channel-details-list"]', null, '#channel-consumers-table'],
        ['consumers', '/consumers', '#consumers-table[data-loaded="true"]', null, `#consumers-table tbody >> text=ui-e2e-consumer-${id}`],
        ['vhosts', `/vhosts?name=${enc('ui-e2e-shots')}`, '#vhosts-table[data-loaded="true"]', null, `#vhosts-table tbody >> text=${vhost}`],
        ['vhost', `/vhost?name=${V}`, '[data-testid="vhost-details-list"]', null, '#vhost-permissions-table', '#vhost-limits-table'],
        ['users', `/users?name=${enc('ui-e2e-shots')}`, '#users-table[data-loaded="true"]', null, `#users-table tbody >> text=${user}`],
        ['user', `/user?name=${enc(user)}`, '[data-testid="user-details-list"]', null, '#user-permissions-table'],
        ['policies', '/policies', '#policies-table[data-loaded="true"]', null, '#policies-table tbody >> text=ui-e2e-shots-policy'],
        ['operator-policies', '/operator-policies', '#policies-table[data-loaded="true"]', null, '#policies-table tbody >> text=ui-e2e-shots-op-policy'],
        ['shovels', '/shovels', '#shovels-table[data-loaded="true"]'],
        ['federation', '/federation', '#upstreams-table[data-loaded="true"]', null, '#links-table[data-loaded="true"]'],
        ['definitions', '/definitions', `#export-definitions-vhost option[value="${vhost}"]`],
        ['nodes', '/nodes', '#nodes-table', null, '[data-testid="node-memory-chart"]:not([data-points="0"])'],
        ['logs', '/logs', '[data-testid="log-line"] >> nth=0'],
      ];
      const problems = [];
      for (const [name, url, ready, action, ...more] of pages) {
        // Listings scoped to the vhost made here: whatever else the broker
        // holds, its entities are on the first page.
        const { context, page, errors } = await open({ vhost });
        try {
          const resp = await page.goto(url);
          assert.equal(resp.status(), 200, `${url}: HTTP ${resp.status()}`);
          await page.locator(ready).first().waitFor({ state: 'attached' });
          for (const sel of more) await page.locator(sel).first().waitFor({ state: 'attached' });
          if (action) await action(page);
          await page.evaluate(() => document.fonts.ready);
          await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
          if (await byTestId(page, 'error-banner').isVisible()) {
            problems.push(`${name}: error banner: ${await byTestId(page, 'error-text').textContent()}`);
          }
          for (const e of errors) problems.push(`${name}: ${e}`);
        } catch (e) {
          await page.screenshot({ path: path.join(SHOTS, `${name}.failed.png`), fullPage: true }).catch(() => undefined);
          problems.push(`${name}: ${e.message.split('\n')[0]}`);
        } finally {
          page.removeAllListeners('console');
          page.removeAllListeners('pageerror');
          await context.close();
        }
      }
      assert.deepEqual(problems, []);
      for (const [name] of pages) assert.ok(fs.existsSync(path.join(SHOTS, `${name}.png`)), `${name}.png`);
    } finally {
      await conn?.close().catch(() => undefined);
      await apiDelete(`/api/users/${enc(user)}`);
      await apiDelete(`/api/vhosts/${V}`);
    }
  });
});
