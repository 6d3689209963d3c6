package sender_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// logLines is a JSON log at debug level, read back line by line.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns the lines whose msg is msg, each as its JSON object.
func (l *logLines) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestOneLinePerFinishedMail: every mail that finishes gets exactly one
// "mail finished" line with its identity, status, attempts, provider, the
// provider's message id and its duration; sent mails at the level of
// log.mail_outcomes (info, or debug when lowered), a failed one at warn
// whatever that says.
func TestOneLinePerFinishedMail(t *testing.T) {
	t.Parallel()
	for name, level := range map[string]slog.Level{"INFO": slog.LevelInfo, "DEBUG": slog.LevelDebug} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			b.srv.Inject(smtptest.Rcpt, smtptest.Reply(550, "no such user"))
			for _, o := range []string{"1", "2", "3"} {
				b.insert(t, o)
			}
			var logs logLines
			cfg := testConfig()
			cfg.OutcomeLevel = level
			b.start(t, cfg, sender.Deps{Log: logs.logger()})
			require.Eventually(t, func() bool { return len(logs.records(t, "mail finished")) == 3 }, 15*time.Second, 10*time.Millisecond)

			rows := b.sc.QueryMap(t, `SELECT dedupe_key, status || ' ' || event_id || ' ' || COALESCE(provider_message_id, '') FROM mail`)
			levels := map[string]int{}
			for _, rec := range logs.records(t, "mail finished") {
				key := rec["dedupe_key"].(string)
				pmid, _ := rec["provider_message_id"].(string)
				require.Equal(t, rows[key], rec["status"].(string)+" "+rec["event_id"].(string)+" "+pmid, key)
				require.EqualValues(t, 1, rec["attempts"], key)
				require.Equal(t, "smtp", rec["provider"], key)
				require.GreaterOrEqual(t, rec["duration_ms"], 0.0, key)
				levels[rec["level"].(string)+" "+rec["status"].(string)]++
				if rec["status"] == "failed" {
					require.Equal(t, "rejected", rec["error_reason"])
					require.Equal(t, "permanent", rec["error_class"])
				} else {
					require.NotEmpty(t, pmid, "the SMTP server's reply to DATA")
					require.NotContains(t, rec, "error")
				}
			}
			require.Equal(t, map[string]int{name + " sent": 2, "WARN failed": 1}, levels)
			require.Empty(t, logs.records(t, "mail sent"), "no second line for the same outcome")
			logs.mu.Lock()
			for _, line := range strings.Split(logs.buf.String(), "\n") {
				if strings.Contains(line, `"msg":"mail finished"`) {
					require.Equal(t, 1, strings.Count(line, `"provider":`), "one provider key per line: %s", line)
				}
			}
			logs.mu.Unlock()
		})
	}
}

// TestJanitorLogsTheMailsItFinishes: an expired send the janitor ends
// unknown gets the same one line, at warn; one it puts back to pending
// gets a "lease expired" line instead.
func TestJanitorLogsTheMailsItFinishes(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	retry, spent := b.insert(t, "r"), b.insert(t, "s")
	b.expire(t, retry, 1, 1, 0, true)
	b.expire(t, spent, 2, 2, 1, true)
	var logs logLines
	j, err := sender.NewJanitor(sender.JanitorConfig{Sender: testConfig(), RetentionWindow: 14 * 24 * time.Hour},
		sender.JanitorDeps{Store: b.sc.Store, Provider: b.smtpProvider(t, "none"), Metrics: sender.NewMetrics(nil), Log: logs.logger()})
	require.NoError(t, err)
	r, err := j.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, r.Settled)

	keys := b.sc.QueryMap(t, `SELECT id::text, dedupe_key FROM mail`)
	finished := logs.records(t, "mail finished")
	require.Len(t, finished, 1)
	require.Equal(t, "WARN", finished[0]["level"])
	require.Equal(t, keys[strconv.FormatInt(spent, 10)], finished[0]["dedupe_key"])
	require.Equal(t, string(mailtype.StatusUnknown), finished[0]["status"])
	require.EqualValues(t, 2, finished[0]["attempts"])
	require.Equal(t, "lease_expired", finished[0]["error_reason"])
	expired := logs.records(t, "lease expired")
	require.Len(t, expired, 1)
	require.Equal(t, keys[strconv.FormatInt(retry, 10)], expired[0]["dedupe_key"])
	require.Equal(t, string(mailtype.StatusPending), expired[0]["status"])
}
