package smtp

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"

	gomail "github.com/wneessen/go-mail"
	gosmtp "github.com/wneessen/go-mail/smtp"
)

// step is the part of a mail transaction a failure happened in; with the
// reply code it decides the failure's class (classifySend).
type step int

const (
	// stepCheck is the NOOP that checks a connection idle for warmFor or
	// more before the transaction.
	stepCheck step = iota
	// stepEnvelope: the message has no usable envelope address.
	stepEnvelope
	stepMail
	stepRcpt
	// stepData is the DATA command, before any of the message.
	stepData
	// stepContent is writing the message, before the final dot.
	stepContent
	// stepDot is the final dot and the reply that says whether the server
	// took the mail.
	stepDot
)

func (s step) String() string {
	return [...]string{"noop", "envelope", "mail from", "rcpt to", "data", "message content", "end of data"}[s]
}

// txError is a failed mail transaction: the step it failed in, and the
// SMTP reply that decided it (code 0 when none came: the connection broke
// or the deadline cut it).
type txError struct {
	step step
	code int
	// text is the reply's text after the code ("5.1.1 User unknown").
	text string
	err  error
}

func (e *txError) Error() string { return fmt.Sprintf("smtp %s: %v", e.step, e.err) }
func (e *txError) Unwrap() error { return e.err }

// failedAt wraps err, a failed write or read of step, as a txError,
// keeping the reply when err is a 4xx or 5xx one (a *textproto.Error): a
// reply of any other code in that place (a 220 to MAIL FROM, a 354 to the
// final dot) is no refusal but a server out of step, counted as no reply.
func failedAt(s step, err error) *txError {
	e := &txError{step: s, err: err}
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 400 && te.Code < 600 {
		e.code, e.text = te.Code, te.Msg
	}
	return e
}

// command is one SMTP command of a transaction and the reply code it
// expects (a single digit prefix, as textproto.Reader.ReadResponse takes
// it: 25 accepts 250 and 251).
type command struct {
	step   step
	expect int
	line   string
}

// transact runs one mail transaction for msg on c (RFC 5321, section 3.3)
// and returns the text of the server's reply to the final dot, which
// usually names the queued message: any 2xx, a positive completion reply
// (RFC 5321, section 4.2.1), means the server took the mail. check sends NOOP first. When the
// server offers PIPELINING (RFC 2920), MAIL FROM, RCPT TO and DATA go out
// in one write and their replies are read in order, so a mail costs two
// round trips instead of four; the message follows only after all three
// succeeded. Any error is a *txError. A failed transaction leaves the
// connection in no defined state: the caller closes it (a server that
// answered DATA with 354 despite a refused recipient, which RFC 2920,
// section 3.1, asks the client to end with a lone dot, sees the close
// instead and takes nothing).
func transact(c *gosmtp.Client, msg outgoing, check bool, dsn dsnParams) (string, error) {
	from, to, err := envelope(msg.Msg)
	if err != nil {
		return "", &txError{step: stepEnvelope, err: err}
	}
	if check {
		if err := c.Noop(); err != nil {
			return "", &txError{step: stepCheck, err: err}
		}
	}
	pipelining, _ := c.Extension("PIPELINING")
	mailDSN, rcptDSN := dsn.params(c, to)
	cmds := []command{
		{stepMail, 250, "MAIL FROM:" + from + mailParams(c) + mailDSN},
		{stepRcpt, 25, "RCPT TO:" + to + rcptDSN},
		{stepData, 354, "DATA"},
	}
	if err := exchange(c.Text, cmds, pipelining); err != nil {
		return "", err
	}
	w := newDotWriter(c.Text.W)
	if _, err := msg.WriteTo(w); err != nil {
		return "", &txError{step: stepContent, err: err}
	}
	// Close writes the final dot and flushes what the buffer still holds.
	// A failed write sent a prefix of it at most, never the dot at its
	// end, so the server cannot have taken the mail: transient.
	if err := w.Close(); err != nil {
		return "", &txError{step: stepContent, err: err}
	}
	_, text, err := c.Text.ReadResponse(2)
	if err != nil {
		return "", failedAt(stepDot, err)
	}
	return text, nil
}

// exchange sends cmds and reads their replies in order: all in one write
// when pipelined, otherwise each command after the previous reply. It
// stops at the first failure.
func exchange(t *textproto.Conn, cmds []command, pipelined bool) error {
	if pipelined {
		for _, cmd := range cmds {
			_, _ = t.W.WriteString(cmd.line + "\r\n")
		}
		if err := t.W.Flush(); err != nil {
			return failedAt(cmds[0].step, err)
		}
	}
	for _, cmd := range cmds {
		if !pipelined {
			_, _ = t.W.WriteString(cmd.line + "\r\n")
			if err := t.W.Flush(); err != nil {
				return failedAt(cmd.step, err)
			}
		}
		if _, _, err := t.ReadResponse(cmd.expect); err != nil {
			return failedAt(cmd.step, err)
		}
	}
	return nil
}

// envelope returns msg's reverse-path and its one forward-path, in angle
// brackets as MAIL FROM and RCPT TO take them.
func envelope(msg *gomail.Msg) (from, to string, err error) {
	from, err = msg.GetSender(false)
	if err != nil {
		return "", "", err
	}
	rcpts, err := msg.GetRecipients()
	if err != nil {
		return "", "", err
	}
	if len(rcpts) != 1 {
		return "", "", fmt.Errorf("%d recipients, want 1", len(rcpts))
	}
	if strings.ContainsAny(from+rcpts[0], "\r\n") {
		return "", "", errors.New("an envelope address contains a line break")
	}
	return from, rcpts[0], nil
}

// mailParams are the MAIL FROM parameters for c's server: BODY=8BITMIME
// (RFC 6152) and SMTPUTF8 (RFC 6531) when it offers them, as go-mail's own
// transaction sends them.
func mailParams(c *gosmtp.Client) string {
	var p string
	if ok, _ := c.Extension("8BITMIME"); ok {
		p += " BODY=8BITMIME"
	}
	if ok, _ := c.Extension("SMTPUTF8"); ok {
		p += " SMTPUTF8"
	}
	return p
}

// dsnParams are what a mail asks of delivery status notifications
// (RFC 3461): NOTIFY for its recipient, and its ENVID.
type dsnParams struct {
	notify, envID string
}

// params are the MAIL FROM and RCPT TO parameters for c's server: none
// unless it offers DSN and a NOTIFY is set; then RET=HDRS (a report carries
// the mail's headers, not its content), ENVID, NOTIFY and ORCPT.
func (d dsnParams) params(c *gosmtp.Client, to string) (mail, rcpt string) {
	if d.notify == "" {
		return "", ""
	}
	if ok, _ := c.Extension("DSN"); !ok {
		return "", ""
	}
	addr := strings.Trim(to, "<>")
	return " RET=HDRS ENVID=" + xtext(d.envID), " NOTIFY=" + d.notify + " ORCPT=rfc822;" + xtext(addr)
}

// xtext encodes s as RFC 3461 section 4 asks: '+', '=', and bytes outside
// '!'..'~' become "+XX"; an ENVID is cut to 100 characters.
func xtext(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 100; i++ {
		c := s[i]
		if c < '!' || c > '~' || c == '+' || c == '=' {
			fmt.Fprintf(&b, "+%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
