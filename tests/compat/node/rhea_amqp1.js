#!/usr/bin/env node
// rhea (AMQP 1.0) smoke test: SASL PLAIN, RabbitMQ 4 "v2" addresses.
// A queue is declared over AMQP 0-9-1 (amqplib); then over AMQP 1.0: a sender
// on /queues/NAME sends 10 messages with application-properties and a string
// body and waits for all to be accepted; a receiver with 10 credits on the
// same address gets them in order, checks body and properties and accepts
// each; a message sent to /exchanges/amq.topic/x.y (nothing bound) must come
// back released.
// Broker from AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/%2F): its
// host, port, credentials and vhost (sent as open.hostname "vhost:NAME").
// Exit code 0 on success, 1 on failure; a global timeout ensures it never hangs.
'use strict';

const amqplib = require('amqplib');
const crypto = require('crypto');
const rhea = require('rhea');

const URL_STR = process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/%2F';
const TIMEOUT_MS = Number(process.env.SMOKE_TIMEOUT_MS || 20000);
const STEP_MS = 5000;
const N = 10;

const timer = setTimeout(() => {
  console.error(`rhea amqp1 smoke FAILED: timed out after ${TIMEOUT_MS} ms`);
  process.exit(1);
}, TIMEOUT_MS);

function withTimeout(promise, ms, what) {
  let t;
  return Promise.race([
    promise.finally(() => clearTimeout(t)),
    new Promise((_, reject) => { t = setTimeout(() => reject(new Error(`timeout: ${what}`)), ms); }),
  ]);
}

function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}

function describeError(e) {
  if (!e) return String(e);
  if (e.condition) return `${e.condition}: ${e.description || ''}`;
  return e.message || JSON.stringify(e);
}

// Resolves with the link once the broker's attach arrives; rejects if the
// broker refuses it (attach followed by detach with an error) or the
// connection fails.
function linkOpened(link, kind, conn) {
  return new Promise((resolve, reject) => {
    link.once(`${kind}_open`, () => resolve(link));
    link.once(`${kind}_error`, (ctx) => reject(new Error(`${kind} refused: ${describeError(ctx[kind].error)}`)));
    conn.once('connection_error', (ctx) => reject(new Error(`connection error: ${describeError(ctx.connection.error)}`)));
    conn.once('disconnected', (ctx) => reject(new Error(`disconnected: ${describeError(ctx.error)}`)));
  });
}

// Waits for the outcome of `delivery` on `sender`: 'accepted', 'released',
// 'rejected' or 'modified' (with the rejection's error, if any).
function outcomeTracker(sender) {
  const waiting = new Map();
  const settle = (outcome) => (ctx) => {
    const w = waiting.get(ctx.delivery);
    if (!w) return;
    waiting.delete(ctx.delivery);
    const state = ctx.delivery.remote_state;
    w({ outcome, error: state && state.error ? describeError(state.error) : undefined });
  };
  for (const o of ['accepted', 'released', 'rejected', 'modified']) sender.on(o, settle(o));
  return (delivery) => new Promise((resolve) => waiting.set(delivery, resolve));
}

async function main() {
  const url = new URL(URL_STR);
  const host = url.hostname || '127.0.0.1';
  const port = Number(url.port || 5672);
  const username = decodeURIComponent(url.username || 'guest');
  const password = decodeURIComponent(url.password || 'guest');
  const vhostPath = url.pathname.replace(/^\//, '');
  const vhost = vhostPath === '' ? '/' : decodeURIComponent(vhostPath);

  // The queue, over 0-9-1.
  const q = `rhea-amqp1-${crypto.randomBytes(6).toString('hex')}`;
  const amqp = await withTimeout(amqplib.connect(URL_STR, { timeout: STEP_MS }), STEP_MS, 'amqplib connect');
  amqp.on('error', (e) => console.error('amqplib connection error:', e.message));
  const ch = await amqp.createChannel();
  ch.on('error', (e) => console.error('amqplib channel error:', e.message));
  await ch.assertQueue(q, { durable: true, autoDelete: false });

  // AMQP 1.0 connection, SASL PLAIN.
  const container = rhea.create_container({ id: `rhea-smoke-${crypto.randomBytes(4).toString('hex')}` });
  const conn = container.connect({
    host, port, username, password,
    hostname: `vhost:${vhost}`,
    reconnect: false,
    idle_time_out: 10000,
  });
  conn.on('error', (ctx) => console.error('rhea error:', describeError(ctx.error)));
  await withTimeout(new Promise((resolve, reject) => {
    conn.once('connection_open', resolve);
    conn.once('connection_error', (ctx) => reject(new Error(`connection refused: ${describeError(ctx.connection.error)}`)));
    conn.once('disconnected', (ctx) => reject(new Error(`disconnected before open: ${describeError(ctx.error)}`)));
  }), STEP_MS, 'AMQP 1.0 open');
  console.log(`rhea: connected to ${host}:${port} (vhost ${vhost}), SASL PLAIN as ${username}`);

  // Sender on the queue: 10 messages, all accepted.
  const address = `/queues/${encodeURIComponent(q)}`;
  const sender = conn.open_sender({ target: { address }, autosettle: true });
  const outcomeOf = outcomeTracker(sender);
  await withTimeout(linkOpened(sender, 'sender', conn), STEP_MS, `sender attach to ${address}`);
  if (!sender.sendable()) {
    await withTimeout(new Promise((resolve) => sender.once('sendable', resolve)), STEP_MS, 'link credit for the sender');
  }
  const pending = [];
  for (let i = 0; i < N; i++) {
    const delivery = sender.send({
      body: `rhea-${i}`,
      application_properties: { i, kind: 'smoke' },
      durable: true,
      message_id: `m-${i}`,
    });
    pending.push(outcomeOf(delivery));
  }
  const outcomes = await withTimeout(Promise.all(pending), STEP_MS, 'the outcomes of 10 transfers');
  outcomes.forEach((o, i) => assert(o.outcome === 'accepted',
    `message ${i} to ${address} accepted, got ${o.outcome}${o.error ? ` (${o.error})` : ''}`));
  console.log(`rhea: ${N} messages sent to ${address}, all accepted`);

  // Receiver with 10 credits: in order, body and properties intact, accepted.
  const receiver = conn.open_receiver({ source: { address }, credit_window: 0, autoaccept: false });
  const received = [];
  const allReceived = new Promise((resolve, reject) => {
    receiver.on('message', (ctx) => {
      try {
        const i = received.length;
        const m = ctx.message;
        received.push(m.body);
        assert(m.body === `rhea-${i}`, `body of message ${i} is 'rhea-${i}', got ${JSON.stringify(m.body)}`);
        const ap = m.application_properties || {};
        assert(ap.i === i && ap.kind === 'smoke',
          `application_properties of message ${i}: ${JSON.stringify(ap)}`);
        assert(m.message_id === `m-${i}`, `message_id of message ${i}: ${JSON.stringify(m.message_id)}`);
        ctx.delivery.accept();
        if (received.length === N) resolve();
      } catch (e) { reject(e); }
    });
  });
  await withTimeout(linkOpened(receiver, 'receiver', conn), STEP_MS, `receiver attach to ${address}`);
  receiver.add_credit(N);
  await withTimeout(allReceived, STEP_MS, `${N} deliveries (got ${received.length})`);
  await withTimeout(new Promise((resolve) => {
    receiver.once('receiver_close', resolve);
    receiver.close();
  }), STEP_MS, 'receiver detach');
  const left = await ch.checkQueue(q);
  assert(left.messageCount === 0, `the queue is empty after accepting all, ${left.messageCount} left`);
  console.log(`rhea: ${N} messages received in order with their properties, all accepted`);

  // Unroutable: released.
  const unroutable = '/exchanges/amq.topic/x.y';
  const usender = conn.open_sender({ target: { address: unroutable }, treat_modified_as_released: false });
  const uoutcomeOf = outcomeTracker(usender);
  await withTimeout(linkOpened(usender, 'sender', conn), STEP_MS, `sender attach to ${unroutable}`);
  if (!usender.sendable()) {
    await withTimeout(new Promise((resolve) => usender.once('sendable', resolve)), STEP_MS, 'link credit');
  }
  const u = await withTimeout(uoutcomeOf(usender.send({ body: 'nobody listens' })), STEP_MS, 'the outcome of an unroutable transfer');
  assert(u.outcome === 'released', `message to ${unroutable} released, got ${u.outcome}${u.error ? ` (${u.error})` : ''}`);
  console.log(`rhea: message to ${unroutable} (nothing bound) released`);

  await withTimeout(new Promise((resolve) => {
    conn.once('connection_close', resolve);
    conn.close();
  }), STEP_MS, 'AMQP 1.0 close');
  await ch.deleteQueue(q);
  await ch.close();
  await amqp.close();
}

main().then(() => {
  clearTimeout(timer);
  console.log('rhea amqp1 smoke OK');
  process.exit(0);
}).catch((err) => {
  clearTimeout(timer);
  console.error('rhea amqp1 smoke FAILED:', err && err.stack ? err.stack : err);
  process.exit(1);
});
