package store_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// confirmWithFiles is a confirmation whose payload names files of the
// given contents (the second, when there are two, optional).
func confirmWithFiles(orderID string, files ...[]byte) store.IngestItem {
	it := confirm(orderID)
	refs := ""
	for i, f := range files {
		sum := sha256.Sum256(f)
		if i > 0 {
			refs += ","
		}
		refs += fmt.Sprintf(`{"file_name":"Hóa đơn %d.pdf","content_type":"application/pdf","url":"https://files.example.com/%d","sha256":"%s","size":%d,"optional":%t}`,
			i, i, hex.EncodeToString(sum[:]), len(f), i > 0)
	}
	it.Mail.Payload = []byte(`{"order_id":"` + orderID + `","attachments":[` + refs + `]}`)
	it.Mail.HasAttachments = len(files) > 0
	return it
}

func claimAll(t *testing.T, b *ingestBundle) []store.ClaimedMail {
	t.Helper()
	got, err := b.sc.Store.ClaimMails(b.ctx, store.ClaimParams{Limit: 10, Lease: time.Minute, Worker: "t"})
	require.NoError(t, err)
	return got
}

// A mail that promised files is not claimed until every file is stored;
// then it is, and its bytes survive a resend and go with retention.
func TestAttachmentsGateTheClaimAndFollowTheMail(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	pdf := []byte("%PDF-1.7 invoice")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionInserted, mailtype.DispositionInserted},
		b.ingest(t, confirmWithFiles("a1", pdf), confirm("plain")))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE attach_state = 'pending'`))

	got := claimAll(t, b)
	require.Len(t, got, 1, "only the mail without attachments is claimable")
	require.Equal(t, "plain", got[0].OrderID)

	jobs, err := b.sc.Store.ClaimAttachJobs(b.ctx, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	j := jobs[0]
	require.Equal(t, 1, j.Pass)
	require.Len(t, j.Refs, 1)
	require.Equal(t, "Hóa đơn 0.pdf", j.Refs[0].FileName)
	require.Equal(t, int64(len(pdf)), j.Refs[0].Size)
	require.Equal(t, store.AttachPending, j.Refs[0].Status)
	again, err := b.sc.Store.ClaimAttachJobs(b.ctx, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, again, "a leased job is not taken twice")

	require.Error(t, b.sc.Store.SaveAttachment(b.ctx, j.MailID, 0, pdf[:3]), "bytes of another size are refused by the table")
	require.NoError(t, b.sc.Store.SaveAttachment(b.ctx, j.MailID, 0, pdf))
	ready, err := b.sc.Store.AttachmentsReady(b.ctx, j.MailID)
	require.NoError(t, err)
	require.True(t, ready)
	got = claimAll(t, b)
	require.Len(t, got, 1)
	require.Equal(t, j.MailID, got[0].ID)

	b.sc.Exec(t, `UPDATE mail SET status = 'sent' WHERE id = $1`, j.MailID)
	key, err := b.sc.Store.Resend(b.ctx, mailtype.ConfirmationKey("a1"), "example.com", "ns")
	require.NoError(t, err)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail m JOIN mail_attachment a ON a.mail_id = m.id
		WHERE m.dedupe_key = $1 AND m.attach_state = 'ready' AND a.status = 'fetched' AND a.content = $2`, key, pdf))

	b.sc.Exec(t, `UPDATE mail SET status = 'sent', updated_at = now() - interval '1000 hours'`)
	n, err := b.sc.Store.DeleteFinished(b.ctx, time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM mail_attachment`), "retention's delete takes the bytes with the mail")
}

// A required file that cannot be had fails the mail with reason
// attachment and one EmailFailed; an optional one is omitted and the mail
// goes.
func TestAttachmentFailureIsExplicit(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	b.ingest(t, confirmWithFiles("f1", []byte("one")), confirmWithFiles("f2", []byte("one"), []byte("two")))
	jobs, err := b.sc.Store.ClaimAttachJobs(b.ctx, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	byOrder := map[int]store.AttachJob{}
	for _, j := range jobs {
		byOrder[len(j.Refs)] = j
	}

	one := byOrder[1]
	require.NoError(t, b.sc.Store.NoteAttachmentFailure(b.ctx, one.MailID, 0, "checksum", "Hóa đơn 0.pdf: sha256 mismatch", store.AttachFailed))
	failed, err := b.sc.Store.FailAttachments(b.ctx, one.MailID, "Hóa đơn 0.pdf: checksum: sha256 mismatch")
	require.NoError(t, err)
	require.True(t, failed)
	failed, err = b.sc.Store.FailAttachments(b.ctx, one.MailID, "again")
	require.NoError(t, err)
	require.False(t, failed, "a failed mail is not failed twice")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'failed'
		AND last_error = 'attachment: Hóa đơn 0.pdf: checksum: sha256 mismatch'`, one.MailID))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailFailed'
		AND payload->'data'->>'error_reason' = 'attachment'`))

	two := byOrder[2]
	require.NoError(t, b.sc.Store.SaveAttachment(b.ctx, two.MailID, 0, []byte("one")))
	require.NoError(t, b.sc.Store.NoteAttachmentFailure(b.ctx, two.MailID, 1, "status", "HTTP 404", ""))
	ready, err := b.sc.Store.AttachmentsReady(b.ctx, two.MailID)
	require.NoError(t, err)
	require.False(t, ready, "a pending file keeps the mail waiting")
	require.NoError(t, b.sc.Store.NoteAttachmentFailure(b.ctx, two.MailID, 1, "status", "HTTP 404", store.AttachOmitted))
	ready, err = b.sc.Store.AttachmentsReady(b.ctx, two.MailID)
	require.NoError(t, err)
	require.True(t, ready)
	require.Equal(t, int64(2), b.count(t, `SELECT attempts FROM mail_attachment WHERE mail_id = $1 AND idx = 1`, two.MailID))
	require.Len(t, claimAll(t, b), 1)

	view, err := b.sc.Store.MailByKey(b.ctx, mailtype.ConfirmationKey("f2"))
	require.NoError(t, err)
	require.Equal(t, "ready", view.AttachState)
	require.Equal(t, []store.AttachmentView{
		{FileName: "Hóa đơn 0.pdf", ContentType: "application/pdf", Size: 3, Status: "fetched", Attempts: 1},
		{FileName: "Hóa đơn 1.pdf", ContentType: "application/pdf", Size: 3, Optional: true, Status: "omitted", Attempts: 2,
			Reason: "status", Detail: "HTTP 404"},
	}, view.Attachments)
}
