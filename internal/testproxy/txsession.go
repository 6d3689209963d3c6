package testproxy

import (
	"net"
	"sync"
)

// txSession is one client of a TxPool and the server connection it is
// linked to, if any.
type txSession struct {
	p      *TxPool
	client net.Conn
	wmu    sync.Mutex // serializes writes to client

	mu sync.Mutex
	b  *txBackend
	// pending counts Syncs and Queries sent and not yet answered by
	// ReadyForQuery; open reports messages sent after the last of them.
	pending int
	open    bool
}

// send forwards one client message, linking a server connection first if
// none is linked.
func (s *txSession) send(msg []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b == nil {
		b, err := s.p.acquire()
		if err != nil {
			return err
		}
		s.b, s.pending, s.open = b, 0, false
		s.p.wg.Add(1)
		go s.pump(b)
	}
	if msg[0] == msgSync || msg[0] == msgQuery {
		s.pending++
		s.open = false
	} else {
		s.open = true
	}
	_, err := s.b.conn.Write(msg)
	return err
}

// pump forwards server messages to the client until the server is idle
// outside a transaction with nothing more asked of it; then it hands the
// server connection back to the pool before the client sees that
// ReadyForQuery, so the client's next message links a fresh one.
func (s *txSession) pump(b *txBackend) {
	defer s.p.wg.Done()
	for {
		msg, err := readMessage(b.conn)
		if err != nil {
			s.unlink(b)
			_ = s.client.Close()
			return
		}
		last := msg[0] == msgReadyForQury && s.answered(b, msg[5])
		if s.write(msg) != nil || last {
			return
		}
	}
}

// answered counts a ReadyForQuery with status and, when the link is done,
// releases the server; it reports whether it did.
func (s *txSession) answered(b *txBackend, status byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if s.pending > 0 || s.open || status != 'I' {
		return false
	}
	s.b = nil
	s.p.release(b)
	return true
}

// unlink drops b, left mid-exchange, from the session and closes it.
func (s *txSession) unlink(b *txBackend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b != b {
		return
	}
	s.b = nil
	s.p.discard(b)
}

// detach ends the session: a linked server is in an unknown state (the
// client left mid-transaction) and is closed.
func (s *txSession) detach() {
	s.mu.Lock()
	b := s.b
	s.mu.Unlock()
	if b != nil {
		s.unlink(b)
	}
}

func (s *txSession) write(msg []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.client.Write(msg)
	return err
}
