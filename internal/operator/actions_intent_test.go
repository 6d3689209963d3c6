package operator_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// TestActionWritesItsIntentRowFirst: the audit row exists (started)
// while the action runs, so a process killed then leaves a row; an action
// whose store call fails ends with exactly one row, failed.
func TestActionWritesItsIntentRowFirst(t *testing.T) {
	t.Parallel()
	b := setupActions(t)
	b.seed(t, "order-confirmed:1", "1", mailtype.StatusFailed)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var during []string
	b.a.Notices = func(string, string) (string, error) {
		// Inside the resend's transaction: what a crash now would leave.
		during = b.sc.QueryStrings(t, `SELECT action || ' ' || result || ' ' || COALESCE(dedupe_key, '-') FROM audit_log`)
		cancel() // the resend's store call fails after the intent row
		return "If you already received this e-mail, please ignore it.", nil
	}
	_, err := b.a.ResendWith(ctx, ann, "order-confirmed:1", "customer asked", false, operator.ResendOptions{Notice: true})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"resend started order-confirmed:1"}, during)
	require.EqualValues(t, 1, b.sc.QueryInt(t, `SELECT count(*) FROM mail`), "nothing resent")

	got := b.audits(t)
	require.Len(t, got, 1)
	require.Equal(t, "failed", got[0].Result)
	require.Equal(t, "order-confirmed:1", got[0].DedupeKey)
	require.Contains(t, got[0].Detail, "context canceled")
	require.Equal(t, store.AuditResultUnknown, store.AuditResultText(store.AuditStarted))
}

// TestActionWithoutItsIntentRowDoesNothing: when the intent row cannot be
// written, the action does not run.
func TestActionWithoutItsIntentRowDoesNothing(t *testing.T) {
	t.Parallel()
	b := setupActions(t)
	b.seed(t, "order-confirmed:1", "1", mailtype.StatusFailed)
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	_, err := b.a.Resend(ctx, ann, "order-confirmed:1", "customer asked", false)
	require.ErrorIs(t, err, context.Canceled)
	require.Contains(t, err.Error(), "resend: nothing done: its audit row could not be written")
	require.EqualValues(t, 1, b.sc.QueryInt(t, `SELECT count(*) FROM mail`))
	require.Empty(t, b.audits(t))
}

// TestActionNamesAreTheAuditLogs: `audit list --action` and ListAudit
// accept exactly the actions the operator records.
func TestActionNamesAreTheAuditLogs(t *testing.T) {
	t.Parallel()
	require.Equal(t, store.AuditActions, []string{operator.ActionResend, operator.ActionReconcile, operator.ActionProviderResume,
		operator.ActionSuppress, operator.ActionUnsuppress, operator.ActionDLQReplay, operator.ActionDLQSkip, operator.ActionOutboxRepublish})
	require.Equal(t, operator.KindInvalid, operator.KindOf(store.ErrBadQuery))
}
