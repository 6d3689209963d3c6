package console

import "time"

// DefaultSessionTTL is how long a login lasts when Config.SessionTTL is 0,
// and console.session_ttl's default (internal/config takes it from here).
const DefaultSessionTTL = 8 * time.Hour
