// Command healthprobe is the container health check for images that have no shell or curl
// (the mailsvc image is distroless): it GETs one path of mailsvc's HTTP server on loopback and
// exits 0 when the answer is 200, else 1 with the reason on stderr.
//
//	healthprobe [PATH]   # PATH defaults to /healthz; use /readyz for readiness
//
// The port comes from MAILSVC_HTTP_ADDR (the http.addr key, default ":8080"), so the probe
// follows the service when its address is overridden the only way a container can: through
// the environment. It uses only the standard library and is built into the image beside
// mailsvc (see the Dockerfile).
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// defaultAddr is config key http.addr's default.
const defaultAddr = ":8080"

// timeout bounds the whole probe: /readyz itself gives its checks 2 s.
const timeout = 3 * time.Second

func main() {
	path := "/healthz"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	url, err := probeURL(os.Getenv("MAILSVC_HTTP_ADDR"), path)
	if err == nil {
		err = probe(url)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthprobe:", err)
		os.Exit(1)
	}
}

// probeURL returns the loopback URL for path on the port of addr (a Go listen address such as
// ":8080", "0.0.0.0:8080" or "127.0.0.1:9000"; "" means the default). A wildcard or empty
// host becomes 127.0.0.1. An address without a port is an error.
func probeURL(addr, path string) (string, error) {
	if addr == "" {
		addr = defaultAddr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("MAILSVC_HTTP_ADDR %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	if len(path) == 0 || path[0] != '/' {
		path = "/" + path
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// probe GETs url within timeout; any answer other than 200 is an error naming the status.
func probe(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, body)
	}
	return nil
}
