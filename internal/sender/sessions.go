package sender

// sessions are a worker's sessions, one per gate of the pool.
type sessions []*liveSession

// liveSession is a worker's session of one provider and whether its last
// send succeeded, which it counts in its gate's live while so (a failed
// send replaces an SMTP connection, so a failure ends the count).
type liveSession struct {
	Session
	g    *gate
	live bool
}

// settle records whether the session's last send succeeded.
func (l *liveSession) settle(ok bool) {
	switch {
	case ok && !l.live:
		l.g.live.Add(1)
	case !ok && l.live:
		l.g.live.Add(-1)
	}
	l.live = ok
}

func newSessions(gates []*gate) sessions {
	s := make(sessions, len(gates))
	for i, g := range gates {
		s[i] = &liveSession{Session: g.prov.NewSession(), g: g}
	}
	return s
}

func (s sessions) of(r *router, g *gate) *liveSession {
	for i, pg := range r.gates {
		if pg == g {
			return s[i]
		}
	}
	return s[0]
}

func (s sessions) close() {
	for _, x := range s {
		x.settle(false)
		_ = x.Close()
	}
}
