package bounce

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Real reports from sisimai's set-of-emails (testdata/sisimai, BSD
// 2-Clause, see README.md there), each with the verdict its
// delivery-status part gives, read by hand: a report that is not RFC
// 3464 (exim's, qmail's, Gmail's and OpenSMTPD's samples here are plain
// text; the Office 365 sample carries no delivery-status part) is
// undetermined.
func TestParseDSNCorpus(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]Report{
		"lhost-postfix-01":      {Verdict: Permanent, Status: "5.1.1", Action: "failed"},
		"lhost-postfix-02":      {Verdict: Permanent, Status: "5.2.1", Action: "failed"},
		"lhost-postfix-05":      {Verdict: Transient, Status: "4.1.1", Action: "failed"},
		"lhost-postfix-13":      {Verdict: Permanent, Status: "5.2.1", Action: "failed"},
		"lhost-sendmail-01":     {Verdict: Permanent, Status: "5.1.1", Action: "failed"},
		"lhost-amazonses-01":    {Verdict: Permanent, Status: "5.0.0", Action: "failed"},
		"lhost-courier-01":      {Verdict: Permanent, Status: "5.0.0", Action: "failed"},
		"lhost-exchange2007-01": {Verdict: Permanent, Status: "5.1.1", Action: "failed"},
		"lhost-exim-01":         {Verdict: Undetermined},
		"lhost-qmail-01":        {Verdict: Undetermined},
		"lhost-gmail-01":        {Verdict: Undetermined},
		"lhost-office365-01":    {Verdict: Undetermined},
		"lhost-opensmtpd-01":    {Verdict: Undetermined},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "sisimai", name+".eml"))
		require.NoError(t, err)
		// Some samples were taken from an mbox: its "From " separator line
		// is no part of a message, and never comes over SMTP.
		if bytes.HasPrefix(b, []byte("From ")) {
			b = b[bytes.IndexByte(b, '\n')+1:]
		}
		got := ParseDSN(bytes.NewReader(b))
		got.Diagnostic = ""
		require.Equal(t, want, got, name)
	}
}

func TestParseDSNShapes(t *testing.T) {
	t.Parallel()
	report := func(blocks ...string) string {
		return "Content-Type: multipart/report; report-type=delivery-status; boundary=b\r\n\r\n--b\r\n" +
			"Content-Type: text/plain\r\n\r\nhuman text\r\n--b\r\nContent-Type: message/delivery-status\r\n\r\n" +
			"Reporting-MTA: dns; mx.example\r\n\r\n" + strings.Join(blocks, "\r\n") + "\r\n--b--\r\n"
	}
	for name, c := range map[string]struct {
		msg  string
		want Verdict
	}{
		"delayed":               {report("Final-Recipient: rfc822; a@example.com\r\nAction: delayed\r\nStatus: 4.4.7\r\n"), Delayed},
		"delivered":             {report("Final-Recipient: rfc822; a@example.com\r\nAction: delivered\r\nStatus: 2.0.0\r\n"), Delivered},
		"relayed":               {report("Final-Recipient: rfc822; a@example.com\r\nAction: relayed\r\nStatus: 2.0.0\r\n"), Delivered},
		"failed without status": {report("Final-Recipient: rfc822; a@example.com\r\nAction: failed\r\n"), Undetermined},
		"worst of two":          {report("Action: delivered\r\nStatus: 2.0.0\r\n", "Action: failed\r\nStatus: 5.1.1 (user unknown)\r\n"), Permanent},
		"no recipient block":    {report(), Undetermined},
		"not mime":              {"Subject: hi\r\n\r\nyour mail bounced\r\n", Undetermined},
		"broken mime":           {"Content-Type: multipart/report; boundary=\r\n\r\n--\r\n", Undetermined},
		"empty":                 {"", Undetermined},
	} {
		require.Equal(t, c.want, ParseDSN(strings.NewReader(c.msg)).Verdict, name)
	}
}
