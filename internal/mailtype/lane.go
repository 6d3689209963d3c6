package mailtype

import "fmt"

// Lane is a mail's priority lane: the sender's dispatcher serves the lanes
// by weight (sender.priority_weight priority mails to one bulk mail while
// both have due mails), so that a mail a person is waiting for passes a
// backlog of bulk mail and neither lane starves (docs/design.md,
// "Priority lanes"). Stored in mail.lane (migration 00290).
type Lane int16

const (
	// LaneBulk is the default lane: order confirmations.
	LaneBulk Lane = 0
	// LanePriority is for mails a person is waiting for: cancellation
	// notices and operator resends by default, and any template whose
	// settings.yaml says lane: priority.
	LanePriority Lane = 1
)

// Lanes lists every lane, in the order metrics and views show them.
var Lanes = []Lane{LanePriority, LaneBulk}

// String is the lane's name as configuration and metrics spell it.
func (l Lane) String() string {
	if l == LanePriority {
		return "priority"
	}
	return "bulk"
}

// ParseLane reads a lane name ("priority" or "bulk"); "" is def.
func ParseLane(s string, def Lane) (Lane, error) {
	switch s {
	case "":
		return def, nil
	case "priority":
		return LanePriority, nil
	case "bulk":
		return LaneBulk, nil
	}
	return def, fmt.Errorf("lane must be priority or bulk, got %q", s)
}
