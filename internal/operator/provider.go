package operator

import (
	"fmt"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// ProviderVerdict says in one line what a provider's shared state
// (store.ProviderState; docs/design.md, "Provider limits, pauses and the
// breaker") means for the mails: sending, or paused (why, since when,
// until when or when the next probe comes, the error that paused it) and
// what the operator can do. Times are shown on the database's clock.
func ProviderVerdict(st store.ProviderState) string {
	if !st.Paused() {
		if st.Failures > 0 {
			return fmt.Sprintf("sending; %d configuration failures in a row (the breaker opens at sender.breaker_threshold)", st.Failures)
		}
		return "sending"
	}
	since := Stamp(&st.PausedAt)
	switch st.Reason {
	case mailtype.PauseRateLimited:
		return fmt.Sprintf("paused by its rate limit (HTTP 429) since %s until %s: mails wait in pending, no attempt spent; %s",
			since, Stamp(&st.PausedUntil), st.Error)
	case mailtype.PauseQuota:
		return fmt.Sprintf("paused: sending quota used up since %s; next probe %s (every sender.quota_probe_interval); "+
			"mails wait in pending, no attempt spent; raise the quota, or `mailsvc provider resume %s` once it was raised; %s",
			since, probeAt(st), st.Provider, st.Error)
	}
	return fmt.Sprintf("paused: circuit breaker open since %s after %d configuration failures in a row; next probe %s "+
		"(every sender.breaker_probe_interval); mails wait in pending, no attempt spent; fix the configuration or the "+
		"provider, then wait for the probe or run `mailsvc provider resume %s`; %s",
		since, st.Failures, probeAt(st), st.Provider, st.Error)
}

// probeAt is when the next probe of a quota or breaker pause is due.
func probeAt(st store.ProviderState) string {
	if !st.PausedUntil.After(st.Now) {
		return "due now"
	}
	return "at " + Stamp(&st.PausedUntil) + " (in " + st.PausedUntil.Sub(st.Now).Round(time.Second).String() + ")"
}

// PausedProviders returns a "provider" field for each paused provider of
// states, for the report of a mail that waits (pending or sending): why it
// waits, when nothing in the mail's own row says so.
func PausedProviders(m store.MailView, states []store.ProviderState) []Field {
	if m.Status != mailtype.StatusPending && m.Status != mailtype.StatusSending {
		return nil
	}
	var out []Field
	for _, st := range states {
		if st.Paused() {
			out = append(out, Field{"provider " + st.Provider, ProviderVerdict(st)})
		}
	}
	return out
}
