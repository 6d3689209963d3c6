package testproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// TestVanishingForwardsNothingAndSwallowsFIN: after Vanish, bytes go
// nowhere and the server never learns that the client closed.
func TestVanishingForwardsNothingAndSwallowsFIN(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	v := testproxy.NewVanishing(t, ln.Addr().String())
	client, err := net.Dial("tcp", v.Addr)
	require.NoError(t, err)
	server := <-accepted
	defer server.Close()

	_, err = client.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(server, buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))

	v.Vanish()
	_, err = client.Write([]byte("lost"))
	require.NoError(t, err)
	_, err = server.Write([]byte("gone"))
	require.NoError(t, err)
	require.NoError(t, client.Close())
	require.NoError(t, server.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
	_, err = server.Read(buf)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "no data and no FIN reach the server, got %v", err)

	// A connection made after Vanish is accepted and held silent.
	late, err := net.Dial("tcp", v.Addr)
	require.NoError(t, err)
	defer late.Close()
	require.NoError(t, late.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = late.Read(buf)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "got %v", err)
}
