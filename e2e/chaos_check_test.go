package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"net/mail"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// delivery is one message the SMTP server took.
type delivery struct {
	at        time.Time
	replyLost string
	messageID string
	body      []byte
}

// mailRow is a mail's end state.
type mailRow struct {
	status           string
	sends, ambiguous int
	// lastError tells who ended the row and how (the worker's
	// recorded error, or the janitor's verdict), for a failure message.
	lastError string
}

// chaosSummary is what the run prints.
type chaosSummary struct {
	published, rows, delivered, duplicates int
	byStatus                               map[string]int
	// dupCauses counts duplicate deliveries by cause.
	dupCauses map[string]int
	// lostReplyOrders and lostReplyUnknown count the orders whose DATA is
	// never answered and how many of them ended unknown.
	lostReplyOrders, lostReplyUnknown   int
	unknownNeverHanded, failedDelivered int
	contradictory, settlements          int
	// tooLateCancelled lists the keys with EmailCancelTooLate and
	// EmailCancelled both (a contradiction).
	tooLateCancelled []string
	// notices counts the cancellation notices, noticesDelivered those
	// the SMTP server took.
	notices, noticesDelivered     int
	feedback, stuck, deadLettered int
	unpublished                   int
}

func (r *chaosRig) check(plan *chaosPlan, fb *e2etest.FeedbackQueue) {
	t := r.t
	sum := chaosSummary{published: len(plan.events), byStatus: map[string]int{}, dupCauses: map[string]int{}}
	rows := r.mailRows()
	events := r.outboxEvents()
	dels := r.deliveriesByKey()
	for key, m := range rows {
		if _, ok := plan.kind[key]; ok {
			sum.rows++
			sum.byStatus[m.status]++
		}
	}
	sum.stuck = sum.byStatus["sending"]
	sum.deadLettered = queueDepth(t, r.s.Names.DeadLetterQueue)
	var broken []string
	for key, kind := range plan.kind {
		ds, m := dels[key], rows[key]
		sum.delivered += len(ds)
		broken = append(broken, r.checkDeliveries(key, ds, &sum)...)
		broken = append(broken, r.checkStatus(key, kind, m, ds, events[key], &sum)...)
		broken = append(broken, checkMailFeedback(key, m.status, ds, events[key], &sum)...)
		broken = append(broken, r.checkNotice(key, events[key], rows, dels, events, &sum)...)
	}
	if notices := len(rows) - sum.rows; notices != sum.notices {
		broken = append(broken, fmt.Sprintf("%d rows beside the confirmations, %d of them cancellation notices of a cancel that came too late", notices, sum.notices))
	}
	for _, f := range r.faults {
		if len(f.last) > chaosWorkers {
			broken = append(broken, fmt.Sprintf("%s of process %d left %d sends started and unrecorded, more than its %d workers",
				f.kind, f.proc, len(f.last), chaosWorkers))
		}
	}
	for _, evs := range events {
		sum.feedback += len(evs)
	}
	var unpub []string
	unpub, sum.unpublished = r.checkPublished(fb)
	broken = append(broken, unpub...)
	if sum.stuck != 0 || sum.deadLettered != 0 || sum.rows != len(plan.kind) {
		broken = append(broken, fmt.Sprintf("stuck=%d dead-lettered=%d rows=%d/%d", sum.stuck, sum.deadLettered, sum.rows, len(plan.kind)))
	}
	sort.Strings(broken)
	// The broken invariants come first: CI keeps the head of a long output.
	if len(broken) > 0 {
		t.Logf("broken invariants (%d):\n  %s", len(broken), strings.Join(broken, "\n  "))
	}
	t.Log(r.summary(&sum))
	t.Logf("chaos log:\n%s", strings.Join(r.log, "\n"))
	require.Empty(t, broken, "broken invariants")
}

// summary renders the run's summary.
func (r *chaosRig) summary(sum *chaosSummary) string {
	kills, killDups, pauseDups := 0, 0, 0
	var maxInflight, inflight int
	for _, f := range r.faults {
		inflight += len(f.inflight)
		maxInflight = max(maxInflight, len(f.last))
		switch f.kind {
		case "SIGKILL", "vanish":
			kills++
			killDups += f.dups
		case "SIGSTOP":
			pauseDups += f.dups
		}
	}
	perKill := 0.0
	if kills > 0 {
		perKill = float64(killDups) / float64(kills)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos summary:\n")
	fmt.Fprintf(&b, "  events published %d, rows %d, rows by status %v\n", sum.published, sum.rows, sum.byStatus)
	fmt.Fprintf(&b, "  faults %v\n", r.counts)
	fmt.Fprintf(&b, "  sends started and unrecorded at a kill, pause or vanish: %d in all, at most %d at once (workers per process %d)\n", inflight, maxInflight, chaosWorkers)
	fmt.Fprintf(&b, "  deliveries %d, duplicate deliveries %d (by cause %v)\n", sum.delivered, sum.duplicates, sum.dupCauses)
	fmt.Fprintf(&b, "  duplicates per kill %.2f (%d duplicates attributed to %d kills incl. vanished hosts); duplicates attributed to %d pauses: %d\n",
		perKill, killDups, kills, r.counts["SIGSTOP"], pauseDups)
	fmt.Fprintf(&b, "  lost-reply orders %d (ended unknown %d)\n", sum.lostReplyOrders, sum.lostReplyUnknown)
	fmt.Fprintf(&b, "  unknown never handed to the provider %d, failed yet delivered %d, contradictory feedback %d, settlements (EmailUnknown then EmailSent) %d\n",
		sum.unknownNeverHanded, sum.failedDelivered, sum.contradictory, sum.settlements)
	fmt.Fprintf(&b, "  EmailCancelTooLate and EmailCancelled both (contradictory) %d %v\n", len(sum.tooLateCancelled), sum.tooLateCancelled)
	fmt.Fprintf(&b, "  cancellation notices %d (delivered %d)\n", sum.notices, sum.noticesDelivered)
	fmt.Fprintf(&b, "  feedback events %d (unpublished %d), stuck in sending %d, dead-lettered %d\n", sum.feedback, sum.unpublished, sum.stuck, sum.deadLettered)
	fmt.Fprintf(&b, "  relay leader vanished: %s", strings.Join(r.takeover, "; "))
	return b.String()
}

// checkDeliveries: at most one duplicate per mail, each explained by an
// ambiguous reply or a fault that caught the mail's send in flight, and
// every copy byte-identical.
func (r *chaosRig) checkDeliveries(key string, ds []delivery, sum *chaosSummary) []string {
	if len(ds) < 2 {
		return nil
	}
	var broken []string
	sum.duplicates += len(ds) - 1
	if len(ds) > 2 {
		broken = append(broken, fmt.Sprintf("%s delivered %d times (at most one duplicate per mail)", key, len(ds)))
	}
	cause := r.duplicateCause(key, ds)
	sum.dupCauses[cause] += len(ds) - 1
	if cause == "" {
		broken = append(broken, fmt.Sprintf("%s delivered %d times with no ambiguous reply, kill or pause to explain it (deliveries at %s)",
			key, len(ds), deliveryTimes(ds)))
	}
	for _, d := range ds[1:] {
		if d.messageID != ds[0].messageID || !bytes.Equal(d.body, ds[0].body) {
			broken = append(broken, key+": attempts carried different content or Message-ID")
		}
	}
	return broken
}

// duplicateCause explains why key was delivered more than once: an earlier
// copy whose reply was lost, or a fault (kill, pause, vanished host)
// before the last copy that caught the mail's send started and unrecorded.
// The fault's duplicate count grows. "" means no allowed cause.
func (r *chaosRig) duplicateCause(key string, ds []delivery) string {
	last := ds[len(ds)-1].at
	for _, d := range ds[:len(ds)-1] {
		if d.replyLost != "" {
			return "ambiguous reply"
		}
	}
	for _, f := range r.faults {
		if f.inflight[key] && f.at.Before(last) {
			f.dups += len(ds) - 1
			return f.kind
		}
	}
	return ""
}

// explained reports whether key's send may have been handed to the
// provider without an answer: a copy whose reply was lost, or a fault that
// caught its send started and unrecorded.
func (r *chaosRig) explained(key string, ds []delivery) bool {
	for _, d := range ds {
		if d.replyLost != "" {
			return true
		}
	}
	for _, f := range r.faults {
		if f.inflight[key] {
			return true
		}
	}
	return false
}

// checkStatus checks one order's end state against its plan.
func (r *chaosRig) checkStatus(key string, kind orderKind, m mailRow, ds []delivery, evs []string, sum *chaosSummary) []string {
	var broken []string
	if m.status == "unknown" && !r.explained(key, ds) {
		sum.unknownNeverHanded++
		broken = append(broken, fmt.Sprintf("%s ended unknown (sends %d, ambiguous %d, feedback %v, last error %q, %d deliveries at [%s]) "+
			"but no send of it was on the wire at a lost reply, kill or pause", key, m.sends, m.ambiguous, evs, m.lastError, len(ds), deliveryTimes(ds)))
	}
	if m.status == "failed" && len(ds) > 0 {
		sum.failedDelivered++
	}
	switch {
	case kind == lostReply:
		sum.lostReplyOrders++
		if m.status == "unknown" {
			sum.lostReplyUnknown++
		}
		if m.status != "unknown" || len(ds) == 0 || strings.Join(evs, ",") != "EmailUnknown" {
			broken = append(broken, fmt.Sprintf("%s: DATA never answered, ended %s with %d deliveries and feedback %v, want unknown and EmailUnknown alone",
				key, m.status, len(ds), evs))
		}
	case m.status == "sent" && len(ds) == 0:
		broken = append(broken, key+": sent but never delivered")
	case m.status == "cancelled" && !kind.hasCancel():
		broken = append(broken, key+": cancelled without a cancel")
	case m.status != "sent" && m.status != "unknown" && m.status != "cancelled":
		broken = append(broken, fmt.Sprintf("%s: ended %s (sends %d, ambiguous %d, deliveries %d, feedback %v)", key, m.status, m.sends, m.ambiguous, len(ds), evs))
	}
	if kind.hasCancel() && m.status == "sent" && count(evs, "EmailCancelTooLate") != 1 {
		broken = append(broken, fmt.Sprintf("%s: sent after a cancel without exactly one EmailCancelTooLate (%v)", key, evs))
	}
	return broken
}

// checkMailFeedback: the feedback events of one mail never contradict each
// other nor the deliveries, and the last terminal one is the status.
// Allowed: one terminal event, or EmailUnknown then EmailSent (a late
// answer settled it); EmailCancelTooLate alongside (with EmailCancelled
// only when nothing was delivered).
func checkMailFeedback(key, status string, ds []delivery, evs []string, sum *chaosSummary) []string {
	var terminal []string
	seen := map[string]int{}
	for _, e := range evs {
		seen[e]++
		if e != "EmailCancelTooLate" {
			terminal = append(terminal, e)
		}
	}
	seq := strings.Join(terminal, ",")
	var why []string
	for e, n := range seen {
		if n > 1 {
			why = append(why, fmt.Sprintf("%d× %s", n, e))
		}
	}
	switch seq {
	case "EmailSent", "EmailUnknown", "EmailFailed":
	case "EmailCancelled":
		if len(ds) > 0 {
			why = append(why, fmt.Sprintf("EmailCancelled though delivered %d times", len(ds)))
		}
		if seen["EmailCancelTooLate"] > 0 {
			sum.tooLateCancelled = append(sum.tooLateCancelled, key)
			why = append(why, "EmailCancelTooLate for a mail that was never delivered")
		}
	case "EmailUnknown,EmailSent":
		sum.settlements++
	default:
		why = append(why, "terminal events "+seq)
	}
	if len(terminal) > 0 && terminal[len(terminal)-1] != "Email"+strings.ToUpper(status[:1])+status[1:] {
		why = append(why, "last terminal event "+terminal[len(terminal)-1]+" but status "+status)
	}
	if len(why) == 0 {
		return nil
	}
	sum.contradictory++
	return []string{fmt.Sprintf("%s: contradictory feedback %v (status %s, %d deliveries): %s", key, evs, status, len(ds), strings.Join(why, "; "))}
}

// checkNotice: a confirmation that was too late to cancel (it has
// EmailCancelTooLate) has exactly one cancellation notice, which ends
// like any mail (its deliveries and events are checked the same way);
// any other has none.
func (r *chaosRig) checkNotice(key string, evs []string, rows map[string]mailRow, dels map[string][]delivery,
	events map[string][]string, sum *chaosSummary) []string {
	notice := "order-cancelled:" + strings.TrimPrefix(key, "order-confirmed:")
	n, exists := rows[notice]
	if count(evs, "EmailCancelTooLate") == 0 {
		if exists {
			return []string{fmt.Sprintf("%s: a cancellation notice though its cancel was not too late (%v)", key, evs)}
		}
		return nil
	}
	if !exists {
		return []string{fmt.Sprintf("%s: too late to cancel, but no cancellation notice", key)}
	}
	sum.notices++
	ds := dels[notice]
	if len(ds) > 0 {
		sum.noticesDelivered++
	}
	broken := r.checkDeliveries(notice, ds, sum)
	if n.status != "sent" && n.status != "unknown" {
		broken = append(broken, fmt.Sprintf("%s ended %s", notice, n.status))
	}
	return append(broken, checkMailFeedback(notice, n.status, ds, events[notice], sum)...)
}

func count(evs []string, e string) int {
	n := 0
	for _, x := range evs {
		if x == e {
			n++
		}
	}
	return n
}

func deliveryTimes(ds []delivery) string {
	var out []string
	for _, d := range ds {
		s := d.at.Format("15:04:05.000")
		if d.replyLost != "" {
			s += " (reply lost)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// mailRows returns every mail's end state by dedupe key.
func (r *chaosRig) mailRows() map[string]mailRow {
	out := map[string]mailRow{}
	r.query(`SELECT dedupe_key, status, sends, ambiguous, COALESCE(last_error, '') FROM mail`, func(scan func(...any) error) {
		var k string
		var m mailRow
		require.NoError(r.t, scan(&k, &m.status, &m.sends, &m.ambiguous, &m.lastError))
		out[k] = m
	})
	return out
}

// outboxEvents returns the feedback event types of each dedupe key, in
// the order they were written.
func (r *chaosRig) outboxEvents() map[string][]string {
	out := map[string][]string{}
	r.query(`SELECT dedupe_key, event_type FROM outbox ORDER BY id`, func(scan func(...any) error) {
		var k, e string
		require.NoError(r.t, scan(&k, &e))
		out[k] = append(out[k], e)
	})
	return out
}

// query runs sql on the test's own pool and calls row for each row.
func (r *chaosRig) query(sql string, row func(scan func(...any) error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := r.owners.pool.Query(ctx, sql)
	require.NoError(r.t, err)
	defer rows.Close()
	for rows.Next() {
		row(rows.Scan)
	}
	require.NoError(r.t, rows.Err())
}

// deliveriesByKey groups the SMTP server's messages by mail: the
// X-Dedupe-Key header carries the row's dedupe key.
func (r *chaosRig) deliveriesByKey() map[string][]delivery {
	byHeader := map[string]string{}
	r.query(`SELECT dedupe_key FROM mail WHERE to_email <> ''`, func(scan func(...any) error) {
		var k string
		require.NoError(r.t, scan(&k))
		byHeader[sender.HeaderKey(k)] = k
	})
	out := map[string][]delivery{}
	for _, m := range r.smtp.Messages() {
		msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
		require.NoError(r.t, err)
		h := msg.Header.Get(sender.DedupeHeader)
		key, ok := byHeader[h]
		require.True(r.t, ok, "a delivered mail whose %s %q names no row", sender.DedupeHeader, h)
		out[key] = append(out[key], delivery{at: m.At, replyLost: m.ReplyLost, messageID: msg.Header.Get("Message-Id"), body: m.Data})
	}
	return out
}

// checkPublished: every outbox row reached mail.events, with message_id =
// event_id. It returns what is broken and how many rows never arrived.
func (r *chaosRig) checkPublished(fb *e2etest.FeedbackQueue) ([]string, int) {
	want := map[string]bool{}
	r.query(`SELECT event_id::text FROM outbox`, func(scan func(...any) error) {
		var id string
		require.NoError(r.t, scan(&id))
		want[id] = true
	})
	var broken []string
	missing := len(want)
	deadline := time.Now().Add(time.Minute)
	for missing > 0 && time.Now().Before(deadline) {
		select {
		case d := <-fb.Out:
			e2etest.RequireContract(r.t, d)
			var f e2etest.Feedback
			require.NoError(r.t, json.Unmarshal(d.Body, &f))
			f.MessageID = d.MessageId
			if f.MessageID != f.EventID {
				broken = append(broken, "a feedback event whose message_id is not its event_id: "+f.EventID)
			}
			if want[f.EventID] {
				delete(want, f.EventID)
				missing--
			}
		case <-time.After(time.Until(deadline)):
		}
	}
	if missing > 0 {
		broken = append(broken, fmt.Sprintf("%d outbox rows never reached the events exchange", missing))
	}
	return broken, missing
}

// queueDepth returns the number of ready messages in a queue.
func queueDepth(t testing.TB, name string) int {
	conn := brokertest.DialRaw(t)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	require.NoError(t, err, "queue %s", name)
	return q.Messages
}
