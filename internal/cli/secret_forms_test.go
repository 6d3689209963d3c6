package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

// marker is in every secret below; it must appear in no output.
const marker = "Zq9Secret"

// closedPort is a loopback address nothing listens on: a connection
// there is refused at once.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// connForms are database.url values that each carry a secret with the
// marker, in every form a user may write: URLs (plain, percent-encoded,
// malformed, in the query) and libpq's keyword/value form (bare, spaces
// around '=', quoted, unterminated, escaped, sslpassword, capitals).
func connForms(addr string) map[string]string {
	host, port, _ := strings.Cut(addr, ":")
	kv := "host=" + host + " port=" + port + " user=postgres dbname=x connect_timeout=2 "
	return map[string]string{
		"url":                "postgres://postgres:" + marker + "pw@" + addr + "/x?connect_timeout=2",
		"url percent":        "postgres://postgres:" + url.PathEscape(marker+" @:/?'\"") + "@" + addr + "/x",
		"url malformed":      "postgres://postgres:" + marker + "%zz@" + addr + "/x",
		"url bad port":       "postgres://postgres:" + marker + "@" + host + ":notaport/x",
		"url query":          "postgres://" + addr + "/x?password=" + marker + "&sslmode=bogus",
		"url two at":         "postgres://postgres:" + marker + "@a@" + addr + "/x?sslmode=bogus",
		"kv bare":            kv + "password=" + marker,
		"kv spaces":          kv + "password = " + marker + " sslmode=bogus",
		"kv tab":             kv + "password\t=\t" + marker + " sslmode=bogus",
		"kv quoted":          kv + "password='" + marker + " with space' sslmode=bogus",
		"kv quoted escaped":  kv + `password='` + marker + `\'q' sslmode=bogus`,
		"kv unterminated":    kv + "password='" + marker + " sslmode=bogus",
		"kv backslash":       kv + `password=` + marker + `\ x sslmode=bogus`,
		"kv sslpassword":     kv + "sslpassword = " + marker + " sslmode=bogus",
		"kv capitals":        kv + "PASSWORD = " + marker + " sslmode=bogus",
		"kv bad key":         kv + "password=" + marker + " nosuchkey = 1",
		"kv no value at end": kv + "sslmode=bogus password = " + marker,
	}
}

// No command prints a secret of database.url, whatever its form: not in
// its error, not on stdout, not on stderr (the log).
func TestNoConnectionStringSecretInAnyOutput(t *testing.T) {
	t.Parallel()
	names := brokertest.New(t)
	addr := closedPort(t)
	commands := [][]string{{"migrate", "status"}, {"mail", "list", "--status", "failed"},
		{"mail", "show", "order-confirmed:42"}, {"config", "check"}, {"serve"}}
	for name, dbURL := range connForms(addr) {
		cfg := writeOpsConfig(t, dbURL, "amqp://guest:guest@"+addr+"/", names, "")
		for _, args := range commands {
			t.Run(name+"/"+strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				requireNoMarker(t, cfg, args...)
			})
		}
	}
}

// A secret read from a *_file, or set in the amqp URL, never shows either.
func TestNoSecretFileOrBrokerSecretInAnyOutput(t *testing.T) {
	t.Parallel()
	names := brokertest.New(t)
	addr := closedPort(t)
	dir := t.TempDir()
	pw := filepath.Join(dir, "smtp-password")
	require.NoError(t, os.WriteFile(pw, []byte(marker+"smtp\n"), 0o600))
	extra := fmt.Sprintf("smtp:\n  username: u\n  password_file: %q\n", pw)
	for name, amqpURL := range map[string]string{
		"amqp":           "amqp://guest:" + marker + "@" + addr + "/",
		"amqp malformed": "amqp://guest:" + marker + "%zz@" + addr + "/",
		"amqp no host":   "amqp://guest:" + marker + "@/",
	} {
		cfg := writeOpsConfig(t, "postgres://postgres@"+addr+"/x?connect_timeout=2", amqpURL, names, extra)
		for _, args := range [][]string{{"config", "check"}, {"serve"}, {"dlq", "list"}} {
			t.Run(name+"/"+strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				requireNoMarker(t, cfg, args...)
			})
		}
	}
}

// requireNoMarker runs the command line with config and fails if the
// marker is in its stdout, its stderr or its error.
func requireNoMarker(t *testing.T, config string, args ...string) {
	t.Helper()
	stdout, stderr, err := runCLIAll(t, config, args...)
	require.NotContains(t, stdout, marker)
	require.NotContains(t, stderr, marker)
	if err != nil {
		require.NotContains(t, err.Error(), marker)
	}
}

// runCLIAll executes the command line with config and returns stdout,
// stderr and the error.
func runCLIAll(t *testing.T, config string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err := Execute(ctx, append([]string{"--config", config}, args...), &out, &errOut)
	return out.String(), errOut.String(), err
}

// A secret file every user can read is named, with its mode, by config
// check (stderr) and serve (a warn line); a 0600 one is not.
func TestSecretFileReadableByAllIsWarnedAbout(t *testing.T) {
	t.Parallel()
	names := brokertest.New(t)
	addr := closedPort(t)
	for mode, warned := range map[os.FileMode]bool{0o644: true, 0o604: true, 0o640: false, 0o600: false} {
		t.Run(fmt.Sprintf("%04o", mode), func(t *testing.T) {
			t.Parallel()
			key := filepath.Join(t.TempDir(), "api-key")
			require.NoError(t, os.WriteFile(key, []byte("re_x\n"), 0o600))
			require.NoError(t, os.Chmod(key, mode))
			cfg := writeOpsConfig(t, "postgres://postgres@"+addr+"/x?connect_timeout=2", "amqp://guest:guest@"+addr+"/",
				names, fmt.Sprintf("resend:\n  api_key_file: %q\n", key))
			want := fmt.Sprintf("resend.api_key_file: %s is readable by every user (mode %04o)", key, mode)
			_, stderr, err := runCLIAll(t, cfg, "config", "check")
			require.NoError(t, err)
			stdout, _, err := runCLIAll(t, cfg, "serve")
			require.Equal(t, ExitUnavailable, ExitCode(err), "%v", err)
			if warned {
				require.Equal(t, "warning: "+want+": chmod 600 it, or set defaultMode: 0400 on the Kubernetes secret volume\n", stderr)
				require.Contains(t, stdout, `"level":"WARN","msg":"config: `+want)
			} else {
				require.Empty(t, stderr)
				require.NotContains(t, stdout, "readable by every user")
			}
		})
	}
}
