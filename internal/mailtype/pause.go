package mailtype

// PauseReason is why every replica stopped sending through a provider
// (table provider_state, column pause_reason; the reason label of
// mailsvc_provider_paused). A closed set: the label is pre-initialised.
type PauseReason string

const (
	// PauseRateLimited: the provider answered HTTP 429 for its rate limit
	// (Resend's rate_limit_exceeded); sends resume by themselves once its
	// Retry-After (or ratelimit-reset) has passed.
	PauseRateLimited PauseReason = "rate_limited"
	// PauseQuota: the account's sending quota is used up (Resend's 429
	// daily_quota_exceeded or monthly_quota_exceeded); one probe send every
	// sender.quota_probe_interval until one succeeds.
	PauseQuota PauseReason = "quota"
	// PauseBreaker: the circuit breaker is open after
	// sender.breaker_threshold consecutive configuration failures
	// (authentication refused, TLS, connection refused); one probe send
	// every sender.breaker_probe_interval until one gets past them.
	PauseBreaker PauseReason = "breaker"
)

// PauseReasons lists every pause reason, in the order of precedence: a
// later one is never replaced by an earlier one while it lasts.
var PauseReasons = []PauseReason{PauseRateLimited, PauseQuota, PauseBreaker}

// Probed reports whether a pause of this reason lasts until a probe send
// succeeds (quota, breaker), rather than until a time the provider named.
func (r PauseReason) Probed() bool { return r == PauseQuota || r == PauseBreaker }
