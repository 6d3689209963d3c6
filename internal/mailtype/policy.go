package mailtype

// AmbiguousPolicy says what a sender does when it cannot know whether the
// provider took a mail (docs/design.md, "Error classes").
type AmbiguousPolicy string

const (
	// PolicyRetry sends again: at-least-once, a duplicate is possible.
	PolicyRetry AmbiguousPolicy = "retry"
	// PolicyUnknown stops and marks the mail unknown: at-most-once, an
	// operator reconciles it.
	PolicyUnknown AmbiguousPolicy = "unknown"
)

// Valid reports whether p is one of the two policies.
func (p AmbiguousPolicy) Valid() bool { return p == PolicyRetry || p == PolicyUnknown }
