// Package backoff computes capped exponential delays with full jitter, the
// schedule every retry loop of mailsvc uses (AWS Architecture Blog,
// "Exponential Backoff And Jitter", 2015).
package backoff

import (
	"math/rand/v2"
	"time"
)

// Delay returns the delay before retry number attempt (1 for the first
// retry): a uniformly random duration in [d/2, d] where
// d = min(base * 2^(attempt-1), max). attempt < 1 is treated as 1; base <= 0
// gives 0. Safe for concurrent use.
func Delay(attempt int, base, max time.Duration) time.Duration {
	d := Ceiling(attempt, base, max)
	if d <= 0 {
		return 0
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Ceiling is the un-jittered delay of Delay: min(base * 2^(attempt-1), max).
func Ceiling(attempt int, base, max time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		if d >= max/2 {
			return max
		}
		d *= 2
	}
	if max > 0 && d > max {
		return max
	}
	return d
}

// Sleep waits for d or until done is closed; it reports whether the full
// delay passed.
func Sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}
