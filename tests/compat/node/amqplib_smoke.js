#!/usr/bin/env node
// amqplib smoke test: connect, assertQueue, sendToQueue, consume+ack,
// confirm channel publish with callback, close.
// Broker URL from AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/%2F).
// Exit code 0 on success, 1 on failure; a global timeout ensures it never hangs.
'use strict';

const amqp = require('amqplib');
const crypto = require('crypto');

const URL = process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/%2F';
const TIMEOUT_MS = Number(process.env.SMOKE_TIMEOUT_MS || 20000);

const timer = setTimeout(() => {
  console.error(`amqplib smoke FAILED: timed out after ${TIMEOUT_MS} ms`);
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

async function main() {
  const conn = await amqp.connect(URL, { timeout: 5000 });
  conn.on('error', (e) => console.error('connection error:', e.message));
  const props = conn.connection.serverProperties || {};
  assert(props.capabilities && props.capabilities.publisher_confirms === true,
    'server advertises publisher_confirms');

  // Plain channel: assertQueue, sendToQueue, consume + ack.
  const ch = await conn.createChannel();
  ch.on('error', (e) => console.error('channel error:', e.message));
  const q = `amqplib-smoke-${crypto.randomBytes(6).toString('hex')}`;
  const ok = await ch.assertQueue(q, { durable: false, autoDelete: false });
  assert(ok.queue === q && ok.messageCount === 0 && ok.consumerCount === 0, 'assertQueue ok');
  const n = 5;
  for (let i = 0; i < n; i++) {
    ch.sendToQueue(q, Buffer.from(`msg-${i}`), { contentType: 'text/plain', headers: { i } });
  }
  const received = [];
  let consumerTag = null;
  await withTimeout(new Promise((resolve, reject) => {
    ch.consume(q, (msg) => {
      if (msg === null) { reject(new Error('consumer cancelled by broker')); return; }
      try {
        received.push(msg.content.toString());
        assert(msg.properties.contentType === 'text/plain', 'contentType round trip');
        assert(msg.properties.headers.i === received.length - 1, 'header round trip');
        ch.ack(msg);
        if (received.length === n) resolve();
      } catch (e) { reject(e); }
    }, { noAck: false }).then((r) => { consumerTag = r.consumerTag; }).catch(reject);
  }), 5000, 'consume');
  await ch.cancel(consumerTag);
  assert(JSON.stringify(received) === JSON.stringify([0, 1, 2, 3, 4].map((i) => `msg-${i}`)),
    `received in order: ${received}`);
  console.log('amqplib: assertQueue/sendToQueue/consume+ack ok');

  // Confirm channel: publish with callback.
  const cch = await conn.createConfirmChannel();
  cch.on('error', (e) => console.error('confirm channel error:', e.message));
  const acked = await withTimeout(new Promise((resolve, reject) => {
    cch.publish('', q, Buffer.from('confirmed'), {}, (err) => (err ? reject(err) : resolve(true)));
  }), 5000, 'publisher confirm');
  assert(acked, 'publish confirmed');
  await withTimeout(cch.waitForConfirms(), 5000, 'waitForConfirms');
  const got = await ch.get(q, { noAck: true });
  assert(got && got.content.toString() === 'confirmed', 'confirmed message is in the queue');
  console.log('amqplib: confirm channel publish ok');

  // Cleanup and close.
  const del = await ch.deleteQueue(q);
  assert(typeof del.messageCount === 'number', 'deleteQueue ok');
  await cch.close();
  await ch.close();
  await conn.close();
  console.log('amqplib: close ok');
}

main().then(() => {
  clearTimeout(timer);
  console.log('amqplib smoke OK');
  process.exit(0);
}).catch((err) => {
  clearTimeout(timer);
  console.error('amqplib smoke FAILED:', err && err.stack ? err.stack : err);
  process.exit(1);
});
