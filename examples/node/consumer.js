#!/usr/bin/env node
// Keeps a per-order projection of mailsvc's feedback events (projection.js)
// in a JSON file, as an order service would in its database. It declares a
// durable quorum queue bound to the mail.events topic exchange with
// email.#, takes one message at a time, applies it, writes the state (the
// projection and the event ids already applied) to the file, and only then
// acks: a crash between the write and the ack redelivers the message, whose
// event_id the state already holds, so nothing is counted twice. A body
// that is not an event is rejected without requeue.
//
// Environment: AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/),
// EVENTS_EXCHANGE (default mail.events), QUEUE (default
// order-service.mail-events), STATE (default mail-status.json). Prints
// "ready" once its queue is bound; runs until SIGINT or SIGTERM.
'use strict';
const fs = require('node:fs');
const amqp = require('amqplib');
const { apply, newState } = require('./projection');

function load(path) {
  try {
    return JSON.parse(fs.readFileSync(path, 'utf8'));
  } catch (err) {
    if (err.code === 'ENOENT') return newState();
    throw err;
  }
}

// save writes to a temporary file and renames it over path, so that a
// reader never sees half a file.
function save(state, path) {
  fs.writeFileSync(path + '.tmp', JSON.stringify(state, null, 2), { mode: 0o600 });
  fs.renameSync(path + '.tmp', path);
}

async function main() {
  const statePath = process.env.STATE || 'mail-status.json';
  const state = load(statePath);
  const exchange = process.env.EVENTS_EXCHANGE || 'mail.events';
  const queue = process.env.QUEUE || 'order-service.mail-events';
  const conn = await amqp.connect(process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/');
  conn.on('close', () => { console.error('consumer: connection closed'); process.exit(1); });
  const ch = await conn.createChannel();
  await ch.assertExchange(exchange, 'topic', { durable: true });
  await ch.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  await ch.bindQueue(queue, exchange, 'email.#');
  await ch.prefetch(1);
  await ch.consume(queue, (msg) => {
    try {
      apply(state, msg.content);
    } catch (err) {
      console.error(`consumer: rejecting message ${msg.properties.messageId}: ${err.message}`);
      ch.reject(msg, false);
      return;
    }
    save(state, statePath); // throws, unacked, on a write error: redelivered after a restart
    ch.ack(msg);
  }, { noAck: false });
  process.stdout.write('ready\n');
  const stop = () => { conn.removeAllListeners('close'); conn.close().finally(() => process.exit(0)); };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((err) => { console.error('consumer:', err.message); process.exit(1); });
