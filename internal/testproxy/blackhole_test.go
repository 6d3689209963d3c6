package testproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes lines and reports on ended when a connection ends
// (the client's close reached it).
func echoServer(t *testing.T) (addr string, ended <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(c, c)
				c.Close()
				ch <- struct{}{}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

func roundTrip(t *testing.T, c net.Conn, line string, within time.Duration) (string, error) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	got, err := bufio.NewReader(c).ReadString('\n')
	return got, err
}

func TestHoleForwardsBlackholesHealsAndResets(t *testing.T) {
	up, ended := echoServer(t)
	h := NewHole(t, up)
	c, err := net.Dial("tcp", h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(t, c, "a", 5*time.Second); err != nil || got != "a\n" {
		t.Fatalf("forwarding: got %q, %v", got, err)
	}

	h.Blackhole()
	if got, err := roundTrip(t, c, "b", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed: got %q, %v; want nothing", got, err)
	}
	fresh, err := net.Dial("tcp", h.Addr)
	if err != nil {
		t.Fatalf("a new connection while blackholed is accepted: %v", err)
	}
	defer fresh.Close()
	if got, err := roundTrip(t, fresh, "c", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection while blackholed: got %q, %v; want nothing", got, err)
	}
	c.Close() // the FIN is swallowed: upstream keeps the connection
	select {
	case <-ended:
		t.Fatal("a close passed through the blackhole")
	case <-time.After(300 * time.Millisecond):
	}

	h.Heal()
	if got, err := roundTrip(t, fresh, "d", 5*time.Second); err != nil || got != "c\n" {
		t.Fatalf("after heal the held line arrives first: got %q, %v", got, err)
	}
	select {
	case <-ended: // the held close went through
	case <-time.After(5 * time.Second):
		t.Fatal("the held close never reached upstream after heal")
	}

	h.Reset()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("reset did not close the upstream connection")
	}
	again, err := net.Dial("tcp", h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got, err := roundTrip(t, again, "e", 5*time.Second); err != nil || got != "e\n" {
		t.Fatalf("after reset: got %q, %v", got, err)
	}
}
