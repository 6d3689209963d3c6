package bounce

import "time"

// The defaults of the bounce keys that the listener and the poller also
// apply to a zero field, written once: bounces.max_message_bytes (a
// report carries the headers of the mail only, RET=HDRS) and
// bounces.imap_interval. internal/config's table takes them from here.
const (
	DefaultMaxMessageBytes = 1 << 20
	DefaultIMAPInterval    = time.Minute
)
