package e2e

import (
	"encoding/json"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/testenv"
)

// mailpit is a real SMTP server we did not write (github.com/axllent/mailpit),
// started per test on free ports; its HTTP API reads back what arrived.
type mailpit struct {
	SMTPAddr string
	APIURL   string
}

// startMailpit runs the binary named by MAILSVC_MAILPIT_BIN (the Makefile
// builds bin/mailpit and sets it).
func startMailpit(t testing.TB) *mailpit {
	t.Helper()
	testenv.NeedsServer(t, "Mailpit")
	bin := os.Getenv("MAILSVC_MAILPIT_BIN")
	if bin == "" {
		bin = "../bin/mailpit"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Mailpit binary %s not found: run `make bin/mailpit` (or `make test`, which builds it)", bin)
	}
	smtpPort, httpPort := e2etest.FreePort(t), e2etest.FreePort(t)
	cmd := exec.Command(bin,
		"--smtp", "127.0.0.1:"+strconv.Itoa(smtpPort), "--listen", "127.0.0.1:"+strconv.Itoa(httpPort),
		"--database", t.TempDir()+"/mailpit.db", "--max", "0", "--disable-version-check",
		"--smtp-auth-accept-any", "--smtp-auth-allow-insecure", "--quiet")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	m := &mailpit{SMTPAddr: fmt.Sprintf("127.0.0.1:%d", smtpPort), APIURL: fmt.Sprintf("http://127.0.0.1:%d/api/v1", httpPort)}
	e2etest.WaitListening(t, m.SMTPAddr, 20*time.Second)
	e2etest.WaitListening(t, fmt.Sprintf("127.0.0.1:%d", httpPort), 20*time.Second)
	return m
}

type mpAddress struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

type mpSummary struct {
	ID        string      `json:"ID"`
	MessageID string      `json:"MessageID"`
	To        []mpAddress `json:"To"`
	Subject   string      `json:"Subject"`
}

type mpMessage struct {
	mpSummary
	Text string `json:"Text"`
	HTML string `json:"HTML"`
}

// messages lists every message Mailpit holds.
func (m *mailpit) messages(t testing.TB) []mpSummary {
	t.Helper()
	var all []mpSummary
	for start := 0; ; start += 500 {
		var page struct {
			Total    int         `json:"messages_count"`
			Messages []mpSummary `json:"messages"`
		}
		r, err := http.Get(m.APIURL + "/messages?limit=500&start=" + strconv.Itoa(start))
		require.NoError(t, err)
		decodeJSON(t, r, &page)
		all = append(all, page.Messages...)
		if len(page.Messages) == 0 || len(all) >= page.Total {
			return all
		}
	}
}

// count returns how many messages Mailpit holds.
func (m *mailpit) count(t testing.TB) int {
	t.Helper()
	var page struct {
		Total int `json:"messages_count"`
	}
	r, err := http.Get(m.APIURL + "/messages?limit=1")
	require.NoError(t, err)
	decodeJSON(t, r, &page)
	return page.Total
}

// message returns one whole message.
func (m *mailpit) message(t testing.TB, id string) mpMessage {
	t.Helper()
	var msg mpMessage
	r, err := http.Get(m.APIURL + "/message/" + url.PathEscape(id))
	require.NoError(t, err)
	decodeJSON(t, r, &msg)
	return msg
}

// decodeJSON decodes an HTTP response body into v.
func decodeJSON(t testing.TB, r *http.Response, v any) {
	t.Helper()
	defer r.Body.Close()
	require.Equal(t, 200, r.StatusCode)
	require.NoError(t, json.NewDecoder(r.Body).Decode(v))
}
