// A per-order projection of mailsvc's feedback events (docs/contract.md,
// "Output"): per order, per mail (the event's dedupe_key), the mail's
// status. Idempotent: an event_id seen before changes nothing. Independent
// of the arrival order of one mail's events: a status only replaces one of
// a lower rank, so a redelivered or requeued older event cannot undo a
// newer one. The same rules as examples/go/projection.
'use strict';

// Delivery outcomes come once per mail, except that an unknown mail is
// settled later (sent or cancelled, rank 2 over unknown's 1). Provider
// reports follow EmailSent: delivered (3), then a bounce or a provider
// failure, the last word on delivery (4). EmailCancelTooLate and
// EmailComplained set a flag and keep the status.
const STATUS = {
  EmailUnknown: ['unknown', 1],
  EmailSent: ['sent', 2],
  EmailCancelled: ['cancelled', 2],
  EmailDelivered: ['delivered', 3],
  EmailFailed: ['failed', 4],
  EmailBounced: ['bounced', 4],
  EmailCancelTooLate: ['', 0],
  EmailComplained: ['', 0],
};

function rank(status) {
  for (const [s, r] of Object.values(STATUS)) if (s !== '' && s === status) return r;
  return 0;
}

function newState() {
  return { orders: {}, seen: {}, applied: 0, duplicates: 0 };
}

// apply adds one feedback event (the message body, a Buffer or string) to
// state. It returns whether the event changed anything, and throws on a
// body that is not an event (reject it rather than ack it). An event type
// this version does not know is ignored: a later mailsvc may add types.
function apply(state, body) {
  const ev = JSON.parse(body.toString('utf8'));
  const data = ev && ev.data;
  if (!ev || !ev.event_id || !ev.dedupe_key || !data || data.order_id === undefined) {
    throw new Error('feedback event without event_id, dedupe_key or data.order_id');
  }
  if (state.seen[ev.event_id]) {
    state.duplicates++;
    return false;
  }
  state.seen[ev.event_id] = true;
  const known = STATUS[ev.event_type];
  if (!known) return false;
  const [status, r] = known;
  // JSON.parse turns an integer order id into a number; String keeps its
  // digits for the ids mailsvc accepts (up to 2^53 exactly).
  const order = String(data.order_id);
  const mails = (state.orders[order] ??= {});
  const m = (mails[ev.dedupe_key] ??= {
    template: '', revision: 0, status: '', attempts: 0, provider: '',
    cancel_too_late: false, complained: false, last_event_id: '',
  });
  m.template = data.template;
  m.revision = data.revision;
  if (ev.event_type === 'EmailCancelTooLate') m.cancel_too_late = true;
  if (ev.event_type === 'EmailComplained') m.complained = true;
  if (status !== '' && r > rank(m.status)) {
    m.status = status;
    m.last_event_id = ev.event_id;
    if ((data.attempts ?? 0) > m.attempts) m.attempts = data.attempts;
    if (data.provider) m.provider = data.provider;
  }
  state.applied++;
  return true;
}

module.exports = { apply, newState, rank };
