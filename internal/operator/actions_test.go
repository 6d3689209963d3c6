package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// actionsBundle is an Actions on its own schema.
type actionsBundle struct {
	sc  *storetest.Schema
	a   *operator.Actions
	ctx context.Context
}

func setupActions(t *testing.T) *actionsBundle {
	t.Helper()
	sc := storetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &actionsBundle{sc: sc, ctx: ctx, a: &operator.Actions{Store: sc.Store, FromDomain: "shop.example", Namespace: "ns"}}
}

// seed inserts a mail with content to b@example.com in status st.
func (b *actionsBundle) seed(t *testing.T, key, orderID string, st mailtype.Status) {
	t.Helper()
	b.sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload, subject, body_text,
		body_html, message_id, status, attempts, provider, provider_message_id, last_error, last_error_class, sent_at)
		VALUES (gen_random_uuid(), $1, $2, 'order_confirmed', 'en', 'b@example.com', '{}', 'Your order', 'text', '<p>html</p>',
		$3, $4, 1, 'smtp', 'pm-7', 'timeout (ambiguous): reset', 'ambiguous', CASE WHEN $4 = 'sent' THEN now() END)`,
		key, orderID, mailtype.MessageID(key, "shop.example"), string(st))
}

// audits returns the audit log, oldest first, without ids and times.
func (b *actionsBundle) audits(t *testing.T) []store.AuditEntry {
	t.Helper()
	list, err := b.sc.Store.ListAudit(b.ctx, store.AuditQuery{Limit: 100})
	require.NoError(t, err)
	slices.Reverse(list)
	for i := range list {
		require.False(t, list[i].At.IsZero())
		list[i].ID, list[i].At = 0, time.Time{}
	}
	return list
}

var ann = operator.Actor{Name: "ann", Via: store.ViaConsole}

func TestResendDryRunDecidesAsTheAction(t *testing.T) {
	t.Parallel()
	b := setupActions(t)
	b.seed(t, "order-confirmed:1", "1", mailtype.StatusFailed)

	dry, err := b.a.Resend(b.ctx, ann, " order-confirmed:1\u00A0", "", true)
	require.NoError(t, err, "a dry run needs no reason")
	require.Equal(t, operator.Result{NewKey: "order-confirmed:1:resend:1",
		Summary: "would create order-confirmed:1:resend:1 (pending) as a copy of order-confirmed:1 (dry run: nothing changed)"}, dry)
	js, err := json.Marshal(dry)
	require.NoError(t, err)
	require.JSONEq(t, `{"summary": "would create order-confirmed:1:resend:1 (pending) as a copy of order-confirmed:1 (dry run: nothing changed)",
		"new_key": "order-confirmed:1:resend:1"}`, string(js), "a dry run records nothing: no audit object")
	require.EqualValues(t, 1, b.sc.QueryInt(t, `SELECT count(*) FROM mail`))
	require.Empty(t, b.audits(t))

	done, err := b.a.Resend(b.ctx, ann, "\uFEFForder-confirmed:1", "customer asked", false)
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:1:resend:1", done.NewKey)
	require.Equal(t, "created order-confirmed:1:resend:1 (pending) as a copy of order-confirmed:1; follow it with `mailsvc mail show order-confirmed:1:resend:1`", done.Summary)
	require.NotZero(t, done.Audit.ID)
	require.Equal(t, "done", done.Audit.Result)
	require.Equal(t, done.Summary, done.Audit.Detail)
	require.EqualValues(t, 1, b.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:1:resend:1' AND status = 'pending'
		AND message_id = $1`, mailtype.MessageID("order-confirmed:1:resend:1", "shop.example")))

	// The copy is pending: both refuse, with the same text.
	_, dryErr := b.a.Resend(b.ctx, ann, "order-confirmed:1", "", true)
	_, realErr := b.a.Resend(b.ctx, ann, "order-confirmed:1", "again", false)
	require.Equal(t, operator.KindRefused, operator.KindOf(realErr))
	require.Equal(t, realErr.Error(), dryErr.Error())
	require.Equal(t, "cannot resend mail order-confirmed:1:resend:1: it is pending; this mail of the same resend family as order-confirmed:1 must end sent or failed before another one", realErr.Error())

	_, err = b.a.Resend(b.ctx, ann, "nope", "why not", false)
	require.Equal(t, operator.KindNotFound, operator.KindOf(err))
	require.EqualError(t, err, "no mail has dedupe key \"nope\" (list an order's mails with `mailsvc mail show --order ID`)")
	_, err = b.a.Resend(b.ctx, ann, "bad\xffkey", "why not", false)
	require.Equal(t, operator.KindInvalid, operator.KindOf(err))
	_, err = b.a.Resend(b.ctx, ann, "order-confirmed:1", " ", false)
	require.ErrorIs(t, err, operator.ErrNoReason)
	require.Equal(t, operator.KindInvalid, operator.KindOf(err))
	require.EqualValues(t, 2, b.sc.QueryInt(t, `SELECT count(*) FROM mail`))

	require.Equal(t, []store.AuditEntry{
		{Actor: "ann", Via: "console", Action: "resend", Target: "order-confirmed:1", DedupeKey: "order-confirmed:1",
			Reason: "customer asked", Result: "done", Detail: done.Summary},
		{Actor: "ann", Via: "console", Action: "resend", Target: "order-confirmed:1", DedupeKey: "order-confirmed:1",
			Reason: "again", Result: "refused", Detail: realErr.Error()},
		{Actor: "ann", Via: "console", Action: "resend", Target: "nope", Reason: "why not", Result: "refused",
			Detail: "no mail has dedupe key \"nope\" (list an order's mails with `mailsvc mail show --order ID`)"},
		{Actor: "ann", Via: "console", Action: "resend", Target: "bad\uFFFDkey", Reason: "why not", Result: "refused",
			Detail: "not a dedupe key: not valid UTF-8: \"bad\\xffkey\"; byte 0xff at offset 3 is not part of a character: check the file's encoding (the input's fault: nothing was looked up)"},
		{Actor: "ann", Via: "console", Action: "resend", Target: "order-confirmed:1", DedupeKey: "order-confirmed:1", Result: "refused",
			Detail: "a reason is required: say why, for the audit log (the input's fault: nothing was looked up)"},
	}, b.audits(t))
}

func TestReconcileAndProviderActions(t *testing.T) {
	t.Parallel()
	b := setupActions(t)
	b.seed(t, "order-confirmed:1", "1", mailtype.StatusUnknown)
	cli := operator.Actor{Name: "root", Via: store.ViaCLI}

	dry, err := b.a.Reconcile(b.ctx, cli, "order-confirmed:1", true, "", true)
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:1 would become sent; EmailSent would be written to the outbox (dry run: nothing changed)", dry.Summary)
	res, err := b.a.Reconcile(b.ctx, cli, "order-confirmed:1", true, "", false)
	require.NoError(t, err, "the CLI may omit the reason")
	require.Equal(t, "order-confirmed:1 is now sent; EmailSent written to the outbox", res.Summary)
	_, err = b.a.Reconcile(b.ctx, cli, "order-confirmed:1", true, "", false)
	require.Equal(t, operator.KindRefused, operator.KindOf(err))

	_, err = b.sc.Store.PauseProvider(b.ctx, "resend", mailtype.PauseQuota, time.Hour, "quota")
	require.NoError(t, err)
	dry, err = b.a.ResumeProvider(b.ctx, cli, "resend", "", true)
	require.NoError(t, err)
	require.Contains(t, dry.Summary, "would resume resend, now paused: sending quota used up since ")
	res, err = b.a.ResumeProvider(b.ctx, cli, " resend ", "quota raised", false)
	require.NoError(t, err)
	require.Equal(t, "resend: sending", res.Summary)
	_, err = b.a.ResumeProvider(b.ctx, cli, "pigeon", "", false)
	require.Equal(t, operator.KindNotFound, operator.KindOf(err))
	require.EqualError(t, err, `no provider "pigeon": smtp or resend`)

	_, err = b.a.ReplayDeadLetters(b.ctx, cli, "", false)
	require.Equal(t, operator.KindRefused, operator.KindOf(err))
	const cut = "replayed 400 of 1000 dead-lettered messages to orders"
	b.a.ReplayDLQ = func(context.Context, bool) (string, error) { return cut, context.DeadlineExceeded }
	res, err = b.a.ReplayDeadLetters(b.ctx, cli, "fixed", false)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, cut, res.Summary)
	b.a.ReplayDLQ = func(context.Context, bool) (string, error) { return "", errors.New("broker gone") }
	_, err = b.a.ReplayDeadLetters(b.ctx, cli, "again", false)
	require.EqualError(t, err, "broker gone")
	b.a.ReplayDLQ = func(context.Context, bool) (string, error) {
		return "replayed 3 of 3 dead-lettered messages to orders", nil
	}
	res, err = b.a.ReplayDeadLetters(b.ctx, cli, "fixed now", false)
	require.NoError(t, err)
	require.Equal(t, "done", res.Audit.Result)

	_, err = b.a.Reconcile(b.ctx, operator.Actor{Name: "", Via: "cli"}, "order-confirmed:1", true, "", false)
	require.Error(t, err, "no actor: nothing done, nothing recorded")
	_, err = b.a.Reconcile(b.ctx, operator.Actor{Name: "x", Via: "fax"}, "order-confirmed:1", true, "", false)
	require.Error(t, err)

	const refusal = "cannot reconcile mail order-confirmed:1: it is sent; only unknown mails are reconciled (an ambiguous send under the unknown policy)"
	require.Equal(t, []store.AuditEntry{
		{Actor: "root", Via: "cli", Action: "reconcile", Target: "order-confirmed:1", DedupeKey: "order-confirmed:1", Result: "done",
			Detail: "order-confirmed:1 is now sent; EmailSent written to the outbox"},
		{Actor: "root", Via: "cli", Action: "reconcile", Target: "order-confirmed:1", DedupeKey: "order-confirmed:1", Result: "refused", Detail: refusal},
		{Actor: "root", Via: "cli", Action: "provider-resume", Target: "resend", Reason: "quota raised", Result: "done", Detail: "resend: sending"},
		{Actor: "root", Via: "cli", Action: "provider-resume", Target: "pigeon", Result: "refused", Detail: `no provider "pigeon": smtp or resend`},
		{Actor: "root", Via: "cli", Action: "dlq-replay", Target: "dead-letter queue", Result: "refused", Detail: operator.ErrNoBroker.Error()},
		{Actor: "root", Via: "cli", Action: "dlq-replay", Target: "dead-letter queue", Reason: "fixed", Result: "failed",
			Detail: cut + "; error: context deadline exceeded"},
		{Actor: "root", Via: "cli", Action: "dlq-replay", Target: "dead-letter queue", Reason: "again", Result: "failed",
			Detail: "nothing replayed; error: broker gone"},
		{Actor: "root", Via: "cli", Action: "dlq-replay", Target: "dead-letter queue", Reason: "fixed now", Result: "done",
			Detail: "replayed 3 of 3 dead-lettered messages to orders"},
	}, b.audits(t))
}

func TestSuppressActionsNormaliseTheAddress(t *testing.T) {
	t.Parallel()
	b := setupActions(t)
	api := operator.Actor{Name: "helpdesk", Via: store.ViaAPI}

	dry, err := b.a.Suppress(b.ctx, api, "Ann <ann@EXAMPLE.com>\u00A0", "", true)
	require.NoError(t, err)
	require.Equal(t, "would suppress ann@example.com: no mail would be sent to it from the next claim on (dry run: nothing changed)", dry.Summary)
	res, err := b.a.Suppress(b.ctx, api, "<ann@example.com>", "asked by phone", false)
	require.NoError(t, err)
	require.Equal(t, "suppressed ann@example.com: no mail is sent to it from the next claim on; undo with `mailsvc suppression remove ann@example.com`", res.Summary)
	require.Equal(t, []string{"ann@example.com"}, b.sc.QueryStrings(t, `SELECT address FROM suppression`))
	dry, err = b.a.Suppress(b.ctx, api, "ann@example.com", "", true)
	require.NoError(t, err)
	require.Regexp(t, `^ann@example.com was suppressed already: since \S+, source operator, reason "asked by phone" \(kept\) \(dry run: nothing changed\)$`, dry.Summary)

	_, dryErr := b.a.Unsuppress(b.ctx, api, "Ann@example.com", "", true)
	_, realErr := b.a.Unsuppress(b.ctx, api, "Ann@example.com", "typo", false)
	require.Equal(t, operator.KindNotFound, operator.KindOf(realErr), "the local part keeps its case")
	require.Equal(t, realErr.Error(), dryErr.Error())
	dry, err = b.a.Unsuppress(b.ctx, api, "ann@example.com ", "", true)
	require.NoError(t, err)
	require.Regexp(t, `^would remove ann@example.com \(source operator, since \S+, reason "asked by phone"\); mails to it would be sent again \(dry run: nothing changed\)$`, dry.Summary)
	res, err = b.a.Unsuppress(b.ctx, api, "ann@example.com ", "works again", false)
	require.NoError(t, err)
	require.Regexp(t, `^removed ann@example.com \(source operator, since \S+, reason "asked by phone"\); mails to it are sent again$`, res.Summary)
	_, err = b.a.Suppress(b.ctx, api, "ann@example.com, bob@example.com", "both", false)
	require.Equal(t, operator.KindInvalid, operator.KindOf(err))

	got := b.audits(t)
	require.Len(t, got, 4)
	require.Equal(t, []string{"suppression-add done ann@example.com", "suppression-remove refused Ann@example.com",
		"suppression-remove done ann@example.com", "suppression-add refused ann@example.com, bob@example.com"},
		[]string{got[0].Action + " " + got[0].Result + " " + got[0].Target, got[1].Action + " " + got[1].Result + " " + got[1].Target,
			got[2].Action + " " + got[2].Result + " " + got[2].Target, got[3].Action + " " + got[3].Result + " " + got[3].Target})
	require.Equal(t, `"Ann@example.com" is not on the suppression list (see `+"`mailsvc suppression list`"+`)`, got[1].Detail)
}

// A reason or an actor's name with a control character or a
// bidirectional override is refused, never stored altered: a NUL would be
// dropped (an empty reason through the console), an escape sequence would
// rewrite the terminal that prints `mailsvc audit list`.
func TestReasonsAndActorsAreText(t *testing.T) {
	t.Parallel()
	b := setupActions(t)
	b.seed(t, "order-confirmed:1", "1", mailtype.StatusSent)
	for _, reason := range []string{"\x00", "a\x00b", "ticket \x1b]0;pwned\x07", "fine\u202Eenif"} {
		_, err := b.a.Resend(b.ctx, ann, "order-confirmed:1", reason, false)
		require.Equal(t, operator.KindInvalid, operator.KindOf(err), "%q", reason)
		require.ErrorContains(t, err, "not a reason: control character")
	}
	_, err := b.a.Resend(b.ctx, operator.Actor{Name: "evil\x1b[31mRED", Via: store.ViaCLI}, "order-confirmed:1", "ok", false)
	require.Equal(t, operator.KindInvalid, operator.KindOf(err))
	require.ErrorContains(t, err, "not an actor's name: control character U+001B at offset 4")
	require.EqualValues(t, 1, b.sc.QueryInt(t, `SELECT count(*) FROM mail`), "nothing resent")
	entries := b.audits(t)
	require.Len(t, entries, 4, "each refusal of a reason recorded, the bad actor's not (it names no one)")
	for _, e := range entries {
		require.Equal(t, "refused", e.Result)
		require.Empty(t, e.Reason)
	}
}
