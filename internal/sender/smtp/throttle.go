package smtp

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
)

// This file reads what a 4xx reply to a transaction says beyond "try
// again later": the relay's rate limit or quota, the greylisting of one
// recipient, or the relay going away. docs/design.md, "SMTP replies and
// what they do", has the table with its sources.

// GreylistRetry is the least wait after a recipient was greylisted:
// Postgrey, the usual greylisting policy server, admits a retry after 300
// s by default (postgrey(8), --delay); RFC 6647, section 4.2, describes
// the delay. An earlier retry would only be greylisted again.
const GreylistRetry = 5 * time.Minute

// throttlePause is how long the relay is paused after a throttling reply
// that names no delay, and maxThrottlePause bounds a delay it names.
const (
	throttlePause    = 5 * time.Second
	maxThrottlePause = time.Hour
)

var (
	// greylistText and throttleText are the words relays put in such
	// replies: Postgrey's "Greylisted", Amazon SES's "454 Throttling
	// failure: Maximum sending rate exceeded" (SES documentation, "SMTP
	// response codes"), Gmail's and Microsoft's rate and "too many"
	// replies.
	greylistText = regexp.MustCompile(`(?i)gr[ae]ylist`)
	throttleText = regexp.MustCompile(`(?i)throttl|rate.?limit|sending rate|too many (messages|mails|emails|connections|sessions|recipients from)|too much mail|rate of`)
	// quotaText is a sending quota (SES "Daily message quota exceeded"),
	// not a full mailbox (4.2.2, the recipient's own quota).
	quotaText = regexp.MustCompile(`(?i)(daily|sending|message|send) quota|quota exceeded`)
	// delayText is a delay a reply names: "try again in 30 seconds",
	// "retry after 2 minutes".
	delayText = regexp.MustCompile(`(?i)\b(?:in|after)\s+(\d{1,5})\s*(seconds?|secs?|s|minutes?|mins?|m)\b`)
)

// replyMeaning classifies e, the transient error of a 4xx reply (code,
// text) to step, by what it says about the relay or the recipient:
//   - the relay's rate limit (421, 450, 451, 452 or 454 with a throttling
//     text, or with 4.7.x to MAIL FROM or as a 421): sender.TroubleRateLimited,
//     for the delay the reply names or throttlePause; its sending quota when
//     the text names one: sender.TroubleQuota;
//   - greylisting of one recipient (a 450 4.2.0 or 450 4.7.1 to RCPT TO,
//     or "greylist" in any reply): the mail waits GreylistRetry, the relay
//     is not paused;
//   - any other 421 (the relay closes the channel, RFC 5321 section
//     4.2.2): sender.TroubleOutage.
//
// Any other reply is e as it came: a transient refusal of this mail.
func replyMeaning(e *mailtype.Error, s step, code int, text string) error {
	enhanced := e.Detail.SMTPEnhancedCode
	switch {
	case throttleText.MatchString(text) && throttling(s, code, enhanced, text):
		return throttled(e, enhanced, text) // "too many recipients from": Postfix's anvil, not a greylist
	case greylisted(s, code, enhanced, text):
		e.After = max(GreylistRetry, namedDelay(text))
		return e
	case throttling(s, code, enhanced, text):
		return throttled(e, enhanced, text)
	case code == 421:
		return &sender.ProviderError{Trouble: sender.TroubleOutage, Err: e}
	}
	return e
}

// throttled marks e as the relay's rate limit, or its quota when the text
// names one (not a full mailbox, 4.2.2).
func throttled(e *mailtype.Error, enhanced, text string) error {
	e.Reason, e.Reroutable = mailtype.ReasonRateLimited, true
	if quotaText.MatchString(text) && enhanced != "4.2.2" {
		return &sender.ProviderError{Trouble: sender.TroubleQuota, Err: e}
	}
	d := throttlePause
	if n := namedDelay(text); n > 0 {
		d = min(n, maxThrottlePause)
	}
	return &sender.ProviderError{Trouble: sender.TroubleRateLimited, After: d, Err: e}
}

// greylisted reports a greylisting reply.
func greylisted(s step, code int, enhanced, text string) bool {
	if greylistText.MatchString(text) {
		return true
	}
	return s == stepRcpt && code == 450 && (enhanced == "4.2.0" || enhanced == "4.7.1")
}

// throttling reports a reply of the relay's rate limit or quota: a
// throttling text in any of these replies, or an enhanced code 4.7.x
// where it is about the client, not one mail: a reply to MAIL FROM, or a
// 421 (the relay closes the channel). A 4.7.x to RCPT TO or to the data
// is a policy's verdict on this mail (a milter's soft reject, content
// greylisting): its own transient refusal.
func throttling(s step, code int, enhanced, text string) bool {
	switch code {
	case 421, 450, 451, 452, 454:
	default:
		return false
	}
	if throttleText.MatchString(text) {
		return true
	}
	return strings.HasPrefix(enhanced, "4.7.") && (s == stepMail || code == 421)
}

// namedDelay is the delay text names ("in 30 seconds"), 0 for none.
func namedDelay(text string) time.Duration {
	m := delayText.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0
	}
	if strings.HasPrefix(strings.ToLower(m[2]), "m") {
		return time.Duration(n) * time.Minute
	}
	return time.Duration(n) * time.Second
}
