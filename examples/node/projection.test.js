'use strict';
// Unit tests of the projection's rules (no broker): node --test.
const test = require('node:test');
const assert = require('node:assert');
const { apply, newState } = require('./projection');
const { build, dedupeKey } = require('./producer');

const ev = (id, type) => JSON.stringify({
  event_id: id, event_type: type, dedupe_key: 'order-confirmed:42',
  data: { order_id: '42', revision: 1, template: 'order_confirmed', attempts: 1, provider: 'smtp' },
});

test('a duplicate event changes nothing', () => {
  const s = newState();
  for (let i = 0; i < 3; i++) apply(s, ev('e1', 'EmailSent'));
  assert.strictEqual(s.applied, 1);
  assert.strictEqual(s.duplicates, 2);
  assert.strictEqual(s.orders['42']['order-confirmed:42'].status, 'sent');
});

test('an older event cannot undo a newer one', () => {
  const evs = [ev('e1', 'EmailUnknown'), ev('e2', 'EmailSent'), ev('e3', 'EmailDelivered'), ev('e4', 'EmailBounced'), ev('e5', 'EmailCancelTooLate')];
  for (const order of [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [1, 3, 0, 4, 2]]) {
    const s = newState();
    for (const i of order) apply(s, evs[i]);
    const m = s.orders['42']['order-confirmed:42'];
    assert.deepStrictEqual([m.status, m.cancel_too_late, m.last_event_id], ['bounced', true, 'e4'], String(order));
  }
});

test('the dedupe key follows the revision', () => {
  assert.strictEqual(dedupeKey('confirmed', '7', 1), 'order-confirmed:7');
  assert.strictEqual(dedupeKey('confirmed', '7', 3), 'order-confirmed:7:r3');
  assert.strictEqual(build({ kind: 'confirmed', order: '7', revision: '2', email: 'a@example.com' }).dedupe_key, 'order-confirmed:7:r2');
});
