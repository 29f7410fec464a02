#!/usr/bin/env node
// mqtt.js smoke test: MQTT 3.1.1 over WebSocket (ws://<http host:port>/mqtt,
// derived from MGMT_URL) and over plain TCP (MQTT_URL): connect, subscribe,
// publish QoS 1, receive; plus a message from the TCP client to the WebSocket
// client and back.
// Exit code 0 on success, 1 on failure; a global timeout ensures it never hangs.
'use strict';

const mqtt = require('mqtt');
const crypto = require('crypto');

const MQTT_URL = process.env.MQTT_URL || 'mqtt://127.0.0.1:1883';
const MGMT_URL = process.env.MGMT_URL || 'http://guest:guest@127.0.0.1:15672';
const TIMEOUT_MS = Number(process.env.SMOKE_TIMEOUT_MS || 20000);
const STEP_MS = 5000;

const timer = setTimeout(() => {
  console.error(`mqtt.js smoke FAILED: timed out after ${TIMEOUT_MS} ms`);
  process.exit(1);
}, TIMEOUT_MS);

function wsUrl() {
  const u = new URL(MGMT_URL);
  return `ws://${u.hostname}:${u.port || 15672}/mqtt`;
}

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

const clients = [];

async function open(url, name) {
  const client = mqtt.connect(url, {
    protocolVersion: 4,
    clientId: `mqttjs-${name}-${crypto.randomBytes(4).toString('hex')}`,
    clean: true,
    keepalive: 30,
    reconnectPeriod: 0,
    connectTimeout: STEP_MS,
  });
  clients.push(client);
  const received = [];
  const waiters = [];
  client.on('message', (topic, payload, packet) => {
    received.push({ topic, payload: payload.toString(), qos: packet.qos, retain: packet.retain });
    while (waiters.length) waiters.shift()();
  });
  const connack = await withTimeout(new Promise((resolve, reject) => {
    client.once('connect', resolve);
    client.once('error', reject);
    client.once('close', () => reject(new Error(`${name}: connection closed before CONNACK`)));
  }), STEP_MS, `${name} CONNACK`);
  client.on('error', (e) => console.error(`${name} error:`, e.message));
  assert(connack.returnCode === 0, `${name} CONNACK return code ${connack.returnCode}`);
  assert(connack.sessionPresent === false, `${name} clean session has no session present`);

  // Waits for the next message on `topic`.
  async function next(topic) {
    return withTimeout((async () => {
      for (;;) {
        const i = received.findIndex((m) => m.topic === topic);
        if (i >= 0) return received.splice(i, 1)[0];
        await new Promise((resolve) => waiters.push(resolve));
      }
    })(), STEP_MS, `${name}: a message on ${topic}`);
  }
  return { client, next };
}

async function roundTrip(url, name) {
  const { client, next } = await open(url, name);
  const topic = `mqttjs/${name}/${crypto.randomBytes(4).toString('hex')}`;
  const granted = await withTimeout(client.subscribeAsync(topic, { qos: 1 }), STEP_MS, `${name} SUBACK`);
  assert(granted.length === 1 && granted[0].qos === 1, `${name} granted QoS 1: ${JSON.stringify(granted)}`);
  await withTimeout(client.publishAsync(topic, `hello over ${name}`, { qos: 1 }), STEP_MS, `${name} PUBACK`);
  const m = await next(topic);
  assert(m.payload === `hello over ${name}`, `${name} payload: ${m.payload}`);
  assert(m.qos === 1, `${name} delivered with QoS 1, got ${m.qos}`);
  assert(m.retain === false, `${name} live delivery not retained`);
  console.log(`mqtt.js: ${name} subscribe/publish QoS 1/receive ok`);
  return { client, next };
}

async function main() {
  const ws = await roundTrip(wsUrl(), 'websocket');
  const tcp = await roundTrip(MQTT_URL, 'tcp');

  // Across transports, both ways.
  const topic = `mqttjs/cross/${crypto.randomBytes(4).toString('hex')}`;
  await withTimeout(ws.client.subscribeAsync(`${topic}/to-ws`, { qos: 1 }), STEP_MS, 'ws SUBACK');
  await withTimeout(tcp.client.subscribeAsync(`${topic}/to-tcp`, { qos: 1 }), STEP_MS, 'tcp SUBACK');
  await withTimeout(tcp.client.publishAsync(`${topic}/to-ws`, 'from tcp', { qos: 1 }), STEP_MS, 'tcp PUBACK');
  await withTimeout(ws.client.publishAsync(`${topic}/to-tcp`, 'from ws', { qos: 1 }), STEP_MS, 'ws PUBACK');
  assert((await ws.next(`${topic}/to-ws`)).payload === 'from tcp', 'tcp -> websocket');
  assert((await tcp.next(`${topic}/to-tcp`)).payload === 'from ws', 'websocket -> tcp');
  console.log('mqtt.js: tcp <-> websocket ok');

  for (const c of [ws.client, tcp.client]) {
    await withTimeout(c.endAsync(), STEP_MS, 'DISCONNECT');
  }
  console.log('mqtt.js: disconnect ok');
}

main().then(() => {
  clearTimeout(timer);
  console.log('mqtt.js smoke OK');
  process.exit(0);
}).catch((err) => {
  clearTimeout(timer);
  console.error('mqtt.js smoke FAILED:', err && err.stack ? err.stack : err);
  for (const c of clients) c.end(true);
  process.exit(1);
});
