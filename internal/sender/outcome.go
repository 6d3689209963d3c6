package sender

import (
	"strconv"
	"time"

	"github.com/mailsvc/mailsvc/internal/backoff"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// outcome applies what a call through g says about the provider to its
// shared state (a rate limit or quota pauses it, a configuration failure
// or an outage counts towards the breaker, a success past the
// configuration checks resets it, a probe's verdict ends or keeps the
// pause) and decides about the mail. A probe that met its provider's
// trouble again spends nothing; neither does a send that met the
// provider's own failure (outageVerdict).
func (e *executor) outcome(g *gate, j *job, st store.Started, rp reply) verdict {
	m, err, atCap := &j.mail, rp.err, rp.atCap
	a := g.rules.attempt(m.Template, st.Sends, st.Ambiguous, e.clock.Since(m.FirstAttemptAt))
	a.Claims = m.Token
	trouble, after := TroubleOf(err)
	run := 0
	switch {
	case err == nil || provesConfig(err):
		g.recovered(j.probe == g)
	case trouble == TroubleBusy:
		e.metrics.SessionsRefused.WithLabelValues(g.name, strconv.FormatBool(atCap)).Inc()
	case trouble == TroubleRateLimited:
		e.metrics.Throttled.WithLabelValues(g.name).Inc()
		g.pause(mailtype.PauseRateLimited, max(after, time.Second), mailtype.Sanitize(err.Error(), e.cfg.Secrets...))
	case trouble == TroubleQuota:
		e.metrics.Throttled.WithLabelValues(g.name).Inc()
		g.pause(mailtype.PauseQuota, e.cfg.QuotaProbe, mailtype.Sanitize(err.Error(), e.cfg.Secrets...))
	case (trouble == TroubleConfig || trouble == TroubleOutage) && j.probe == g:
		e.log.Warn("probe failed: the provider stays paused", append(j.logAttrs(), "error", mailtype.Sanitize(err.Error(), e.cfg.Secrets...))...)
	case trouble == TroubleConfig || trouble == TroubleOutage:
		run = g.failure(trouble, mailtype.Sanitize(err.Error(), e.cfg.Secrets...))
	}
	v := decide(err, rp.r, a)
	// A send that may have delivered the mail is only sent again under
	// the ambiguous rules (decide), never as the provider's trouble.
	unsent := a.resendIsSafe() || (mailtype.ClassOf(err) != mailtype.Ambiguous && !a.keyExpired())
	switch {
	case j.probe == g && trouble != "" && trouble != TroubleInProgress && unsent:
		v = e.outageVerdict(g, err, a)
	case atCap:
		v = unspentVerdict(err, a, time.Second)
		v.atCap = true
	case providerWide(trouble, run, g) && unsent:
		v = e.outageVerdict(g, err, a)
	}
	if v.Outcome == OutcomeUnanswered {
		e.metrics.Unspent.WithLabelValues(g.name, string(trouble)).Inc()
	}
	v.refused = trouble == TroubleBusy
	if g != e.router.primary() && !v.Record.Release {
		v.Record.FailoverFrom = e.router.primary().name
	}
	return v
}

// providerWide reports whether a send's trouble is the provider's, not the
// mail's: a configuration failure always; an outage when it is not the
// only failure in a row (run, the consecutive failures across replicas
// this one made; 0 when it was not counted) or the provider is paused.
func providerWide(trouble Trouble, run int, g *gate) bool {
	switch trouble {
	case TroubleConfig:
		return true
	case TroubleOutage:
		return run >= 2 || g.paused()
	}
	return false
}

// outageVerdict sends the mail back to pending unspent after a send that
// met its provider's own failure (unansweredVerdict): due at the paused
// provider's next probe, else after the mail's backoff.
func (e *executor) outageVerdict(g *gate, err error, a attempt) verdict {
	retry := backoff.Delay(a.Claims, a.RetryBackoff, a.RetryBackoffMax)
	if paused, _, until := g.pausedUntil(); paused {
		retry = max(e.clock.Until(until), e.cfg.PollInterval)
	}
	return unansweredVerdict(err, a, retry)
}

// provesConfig reports whether a failed send got past every configuration
// check of its provider (connection, TLS, authentication, API key): the
// provider answered about the mail itself, or may have taken it. A failure
// that is the provider's own trouble (an outage included: no answer, even
// after the request was written) proves nothing.
func provesConfig(err error) bool {
	if t, _ := TroubleOf(err); t != "" {
		return false
	}
	switch mailtype.ReasonOf(err) {
	case mailtype.ReasonDeferred, mailtype.ReasonRejected, mailtype.ReasonInvalidAddress, mailtype.ReasonServerError:
		return true
	}
	return mailtype.ClassOf(err) == mailtype.Ambiguous
}
