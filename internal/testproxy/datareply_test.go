package testproxy_test

import (
	"net/smtp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// send sends one message through addr and returns the error of the end
// of its data (the server's reply to the dot) or of an earlier step.
func send(addr, body string) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Mail("a@example.com"); err != nil {
		return err
	}
	if err := c.Rcpt("b@example.com"); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte(body)); err != nil {
		return err
	}
	return w.Close()
}

// An armed cutter loses the server's reply to the end of one message's
// data, which the server took all the same; the message after it, and
// every byte of a message whose lines merely contain "DATA" or a dot,
// pass untouched.
func TestReplyCutterLosesOneDataReply(t *testing.T) {
	t.Parallel()
	srv := smtptest.New(t, smtptest.Options{})
	r := testproxy.NewReplyCutter(t, srv.Addr)
	// net/smtp dot-stuffs the line starting with a dot; the server
	// takes it back as written.
	body := "Subject: x\r\n\r\nDATA\r\n..a dot-stuffed line\r\n" + strings.Repeat(strings.Repeat("y", 70)+"\r\n", 1000)
	r.LoseDataReplies(1)
	require.Error(t, send(r.Addr, body), "the reply to the dot was lost")
	require.NoError(t, send(r.Addr, body))
	require.Equal(t, 1, r.Lost())
	require.Equal(t, 2, srv.Count(), "the server took both messages")
	for _, m := range srv.Messages() {
		require.True(t, strings.Contains(string(m.Data), "\r\nDATA\r\n..a dot-stuffed line\r\n"), "the message passed whole")
	}
}
