package bounce_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-imap"
	"github.com/emersion/go-imap/client"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/bounce"

	"github.com/mailsvc/mailsvc/internal/testenv"
)

// startDovecot runs a private Dovecot (its own configuration, run and
// mail directories under a temporary directory, IMAP on a loopback port,
// any user with password "box-secret") and returns its address. It needs
// root and the dovecot-imapd package (scripts/mailservers.sh installs it).
func startDovecot(t *testing.T) string {
	t.Helper()
	testenv.NeedsServer(t, "a private Dovecot")
	if _, err := os.Stat("/usr/sbin/dovecot"); err != nil {
		t.Fatal("dovecot is not installed: run scripts/mailservers.sh (make test does) or install Debian's dovecot-imapd package")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the mailbox test starts Dovecot, which needs root: run make test as root")
	}
	du, err := user.Lookup("dovecot")
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "mailsvc-dovecot-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	for _, d := range []string{"run", "mail"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	uid, _ := strconv.Atoi(du.Uid)
	gid, _ := strconv.Atoi(du.Gid)
	require.NoError(t, os.Chown(filepath.Join(dir, "mail"), uid, gid))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(dir, "dovecot.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`base_dir = %[1]s/run
state_dir = %[1]s/run
log_path = %[1]s/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:%[1]s/mail/%%u
first_valid_uid = 1
passdb {
  driver = static
  args = password=box-secret
}
userdb {
  driver = static
  args = uid=dovecot gid=dovecot home=%[1]s/mail/%%u
}
service imap-login {
  chroot =
  inet_listener imap {
    address = 127.0.0.1
    port = %[2]s
  }
  inet_listener imaps {
    port = 0
  }
}
service anvil {
  chroot =
}
`, dir, port)), 0o644))
	// Its output goes to a file: the daemon it forks keeps a pipe open.
	start := exec.Command("/usr/sbin/dovecot", "-c", conf)
	errLog, err := os.Create(filepath.Join(dir, "start.log"))
	require.NoError(t, err)
	defer errLog.Close()
	start.Stdout, start.Stderr = errLog, errLog
	require.NoError(t, start.Run(), "dovecot did not start: see %s", errLog.Name())
	t.Cleanup(func() {
		_ = exec.Command("/usr/sbin/dovecot", "-c", conf, "stop").Run()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "dovecot.log"))
			t.Logf("dovecot log:\n%s", b)
		}
		_ = os.RemoveAll(dir)
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "dovecot never listened on %s", addr)
	return addr
}

// appendMail puts msg in user's INBOX as a delivering MTA would.
func appendMail(t *testing.T, addr, user, msg string) {
	t.Helper()
	c, err := client.Dial(addr)
	require.NoError(t, err)
	defer func() { _ = c.Logout() }()
	require.NoError(t, c.Login(user, "box-secret"))
	require.NoError(t, c.Append("INBOX", nil, time.Now(), strings.NewReader(strings.ReplaceAll(msg, "\n", "\r\n"))))
}

// Reports that landed in a company mailbox are recorded on their mails and
// deleted; a message that names no mail is left there, seen and flagged,
// for a person; a forged token changes nothing.
func TestPollerReadsTheBounceMailbox(t *testing.T) {
	t.Parallel()
	addr := startDovecot(t)
	h := newHarness(t, bounce.Config{})
	hard := h.sentBySMTP(t, "1", "gone@example.com")
	soft := h.sentBySMTP(t, "2", "full@example.com")
	forged := bounce.Verp{LocalPart: "bounces", Domain: "bounce.shop.example", Secret: []byte("guess")}
	appendMail(t, addr, "bounces", "Delivered-To: "+verp.Address(hard)+"\n"+dsn("failed", "5.1.1"))
	appendMail(t, addr, "bounces", "To: <"+verp.Address(soft)+">\n"+dsn("failed", "4.2.2"))
	appendMail(t, addr, "bounces", "To: someone@example.com\nSubject: out of office\n\nback on Monday\n")
	appendMail(t, addr, "bounces", "Delivered-To: "+forged.Address(hard)+"\n"+dsn("failed", "5.1.1"))

	p, err := bounce.NewPoller(bounce.PollerConfig{URL: "imap://bounces:box-secret@" + addr + "/INBOX", Verp: verp},
		bounce.Deps{Store: h.sc.Store, Metrics: h.metrics})
	require.NoError(t, err)
	n, err := p.Poll(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = p.Poll(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "nothing new")

	require.Equal(t, map[string]string{"1": "failed", "2": "failed"}, h.sc.QueryMap(t, `SELECT order_id, status FROM mail`))
	require.Equal(t, map[string]string{"gone@example.com": "dsn/bounce"}, h.sc.QueryMap(t, `SELECT address, source FROM suppression`))
	require.Equal(t, 2, counter(t, h.metrics.Refused.WithLabelValues("bad_token")))

	c, err := client.Dial(addr)
	require.NoError(t, err)
	defer func() { _ = c.Logout() }()
	require.NoError(t, c.Login("bounces", "box-secret"))
	st, err := c.Select("INBOX", true)
	require.NoError(t, err)
	require.Equal(t, uint32(2), st.Messages, "the two reports were deleted, the others kept")
	crit := imap.NewSearchCriteria()
	crit.WithFlags = []string{imap.SeenFlag, imap.FlaggedFlag}
	left, err := c.Search(crit)
	require.NoError(t, err)
	require.Len(t, left, 2, "kept for a person: seen and flagged")

	_, err = bounce.NewPoller(bounce.PollerConfig{URL: "https://bounces:pw@" + addr, Verp: verp}, bounce.Deps{})
	require.EqualError(t, err, "bounces.imap_url: must be imaps://USER:PASSWORD@HOST[:PORT]/MAILBOX (or imap://)")
}
