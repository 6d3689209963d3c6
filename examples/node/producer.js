#!/usr/bin/env node
// Publishes one OrderConfirmed or OrderCancelled event to mailsvc the way
// the contract asks (docs/contract.md, "Input"): a persistent message on the
// topic exchange order.events with routing key order.confirmed or
// order.cancelled, message_id = event_id, type = event_type, content_type
// application/json, mandatory, on a confirm channel. Exits 0 only once the
// broker confirmed the event into a bound queue; 1 on a nack (mailsvc's
// queue is full: keep the event in your outbox and publish it again later),
// a return (no queue bound: mailsvc has not declared its topology yet) or
// any other error.
//
//   node producer.js --kind confirmed --order 1001 --email a@example.com [--revision 2] [--event-id UUID]
//   node producer.js --kind cancelled --order 1001 [--revision 2]
//
// AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/) and ORDER_EXCHANGE
// (default order.events) say where. The event's JSON is printed on stdout.
// Reuse --event-id when publishing the same event again: mailsvc dedupes on
// it, and on dedupe_key.
'use strict';
const crypto = require('node:crypto');
const { parseArgs } = require('node:util');
const amqp = require('amqplib');

// dedupeKey is the contract's key: order-confirmed:{order_id} for revision
// 1, order-confirmed:{order_id}:r{n} above; a cancel's key is not used by
// mailsvc and follows the same convention with order-cancelled.
function dedupeKey(kind, orderId, revision) {
  return `order-${kind}:${orderId}` + (revision > 1 ? `:r${revision}` : '');
}

function build(o) {
  if (!o.order) throw new Error('--order is required');
  const revision = Number(o.revision ?? '1');
  if (!Number.isInteger(revision) || revision < 1) throw new Error('--revision must be an integer of 1 or more');
  const ev = {
    // Any UUID is accepted; mailsvc's own events use UUIDv7.
    event_id: o['event-id'] || crypto.randomUUID(),
    event_type: '',
    version: 1,
    occurred_at: new Date().toISOString(),
    dedupe_key: dedupeKey(o.kind, o.order, revision),
    data: { order_id: o.order, revision },
  };
  if (o.kind === 'confirmed') {
    if (!o.email) throw new Error('--email is required with --kind confirmed');
    ev.event_type = 'OrderConfirmed';
    Object.assign(ev.data, {
      email: o.email, customer_name: o.name ?? '', locale: o.locale ?? 'en', currency: 'USD', total: '25.50',
      items: [
        { sku: 'SKU-2', name: 'T-shirt', quantity: 1, unit_price: '12.50' },
        { sku: 'SKU-3', name: 'Socks', quantity: 2, unit_price: '6.50' },
      ],
    });
  } else if (o.kind === 'cancelled') {
    ev.event_type = 'OrderCancelled';
    ev.data.reason = 'customer request';
  } else {
    throw new Error(`--kind ${o.kind}: want confirmed or cancelled`);
  }
  return ev;
}

async function publish(url, exchange, ev) {
  const conn = await amqp.connect(url);
  try {
    const ch = await conn.createConfirmChannel();
    // Shared with mailsvc, which declares it the same way; idempotent.
    await ch.assertExchange(exchange, 'topic', { durable: true });
    let returned = null;
    ch.on('return', (msg) => { returned = msg; });
    const routingKey = ev.event_type === 'OrderConfirmed' ? 'order.confirmed' : 'order.cancelled';
    await new Promise((resolve, reject) => {
      ch.publish(exchange, routingKey, Buffer.from(JSON.stringify(ev)), {
        persistent: true, mandatory: true, contentType: 'application/json',
        messageId: ev.event_id, type: ev.event_type, timestamp: Math.floor(Date.parse(ev.occurred_at) / 1000),
      }, (err) => (err ? reject(new Error('nacked by the broker (mailsvc\'s queue is full): keep the event and publish it again later')) : resolve()));
    });
    // A returned message arrives before its confirm.
    if (returned) {
      throw new Error(`returned ${returned.fields.replyCode} ${returned.fields.replyText}: no queue is bound to ${exchange} for ${routingKey} (is mailsvc running?)`);
    }
    await ch.close();
  } finally {
    await conn.close();
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      kind: { type: 'string', default: 'confirmed' }, order: { type: 'string' }, revision: { type: 'string' },
      email: { type: 'string' }, name: { type: 'string' }, locale: { type: 'string' }, 'event-id': { type: 'string' },
    },
  });
  const ev = build(values);
  const timer = setTimeout(() => { console.error('producer: no confirm within 30 s (publish the same event_id again later)'); process.exit(1); }, 30000);
  await publish(process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/', process.env.ORDER_EXCHANGE || 'order.events', ev);
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(ev) + '\n');
}

if (require.main === module) {
  main().catch((err) => { console.error('producer:', err.message); process.exit(1); });
}
module.exports = { build, dedupeKey };
