package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// postfix is a private Postfix instance: its own configuration and queue
// under a temporary directory, SMTP on a loopback port, never the
// system's /etc/postfix.
type postfix struct {
	dir, conf string
	// Addr is its SMTP listener.
	Addr string
}

// startPostfix starts a Postfix that relays mail for good.test (taken and
// discarded: delivered), rejected.test (refused at RCPT, 550 5.1.1) and
// nowhere.test (taken, then handed to remote, an SMTP server that refuses
// it: Postfix bounces it with a report), and delivers mail for
// bounceDomain, the reports it makes, to bounceAddr. It needs root
// (Postfix's master) and the postfix package (scripts/mailservers.sh
// installs it).
func startPostfix(t *testing.T, bounceDomain, bounceAddr, remote string) *postfix {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/postfix"); err != nil {
		t.Fatal("postfix is not installed: run scripts/mailservers.sh (make test does) or install Debian's postfix package")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the Postfix test starts Postfix's master, which needs root: run make test as root")
	}
	pu, err := user.Lookup("postfix")
	require.NoError(t, err, "the postfix package creates user postfix")
	dir, err := os.MkdirTemp("", "mailsvc-postfix-")
	require.NoError(t, err)
	p := &postfix{dir: dir, conf: filepath.Join(dir, "conf"), Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	for _, d := range []string{p.conf, filepath.Join(dir, "queue"), filepath.Join(dir, "data")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.Chmod(dir, 0o755)) // Postfix's daemons run as user postfix
	uid, _ := strconv.Atoi(pu.Uid)
	gid, _ := strconv.Atoi(pu.Gid)
	require.NoError(t, os.Chown(filepath.Join(dir, "data"), uid, gid))
	require.NoError(t, os.WriteFile(filepath.Join(p.conf, "main.cf"), []byte(p.mainCF(bounceDomain, bounceAddr, remote)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(p.conf, "master.cf"), []byte(p.masterCF(t)), 0o644))
	t.Cleanup(func() {
		_ = exec.Command("/usr/sbin/postfix", "-c", p.conf, "stop").Run()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "maillog"))
			t.Logf("postfix log:\n%s", b)
		}
		_ = os.RemoveAll(dir)
	})
	out, err := exec.Command("/usr/sbin/postfix", "-c", p.conf, "start").CombinedOutput()
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "maillog"))
		t.Fatalf("postfix start: %v %s\n%s", err, out, b)
	}
	waitListening(t, p.Addr, 20*time.Second)
	return p
}

func (p *postfix) mainCF(bounceDomain, bounceAddr, remote string) string {
	return fmt.Sprintf(`compatibility_level = 3.6
queue_directory = %[1]s/queue
data_directory = %[1]s/data
maillog_file = %[1]s/maillog
maillog_file_prefixes = %[1]s
mail_owner = postfix
myhostname = relay.mailsvc.test
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
relay_domains = good.test, nowhere.test, rejected.test
smtpd_relay_restrictions = permit_mynetworks, reject
transport_maps = inline:{ good.test=discard:, { rejected.test = error:5.1.1 user unknown }, nowhere.test=smtp:%[4]s, %[2]s=smtp:%[3]s }
smtp_dns_support_level = disabled
alias_maps =
alias_database =
local_recipient_maps =
queue_run_delay = 1s
minimal_backoff_time = 1s
maximal_backoff_time = 2s
`, p.dir, bounceDomain, nextHop(bounceAddr), nextHop(remote))
}

// nextHop is host:port as Postfix's smtp transport takes it without an
// MX lookup: [host]:port.
func nextHop(addr string) string {
	host, port, _ := strings.Cut(addr, ":")
	return "[" + host + "]:" + port
}

// masterCF is Debian's master.cf with no service chrooted (the private
// queue has no chroot tree) and smtpd on p's loopback port.
func (p *postfix) masterCF(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/etc/postfix/master.cf")
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && line[0] != '#' && line[0] != ' ' {
			if f[4] == "y" {
				f[4] = "n"
			}
			if f[0] == "smtp" && f[1] == "inet" {
				f[0] = p.Addr
			}
			line = strings.Join(f, " ")
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// A real MTA between mailsvc and the world: Postfix takes three mails. It
// delivers one; it refuses one at RCPT (550 5.1.1: mailsvc fails it and
// suppresses the address, smtp/reject); it takes the third, its next hop
// refuses it, and Postfix sends its own delivery status notification
// (RFC 3464) to the mail's VERP return path, which reaches mailsvc's
// bounce listener: the mail ends failed with its EmailBounced and the
// address is suppressed (dsn/bounce). The delivered one stays sent.
func TestPostfixBounceComesBack(t *testing.T) {
	t.Parallel()
	remote := smtptest.New(t, smtptest.Options{})
	remote.Inject(smtptest.Rcpt, smtptest.ReplyText(550, "5.1.1 <nobody@nowhere.test>: user unknown"))
	bounces := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	pf := startPostfix(t, "bounce.mailsvc.test", bounces, remote.Addr)
	s := newStack(t, pf.Addr)
	fb := newFeedbackQueue(t, s.names)
	pub := newPublisher(t, s.names)
	_, err := s.cli("migrate")
	require.NoError(t, err)
	s.serve(map[string]string{"MAILSVC_BOUNCES_ADDRESS": "bounces@bounce.mailsvc.test",
		"MAILSVC_BOUNCES_SECRET": "a-secret-of-32-bytes-for-the-tests", "MAILSVC_BOUNCES_ADDR": bounces})

	gone, kept, refused := confirmed(1, "en"), confirmed(2, "vi"), confirmed(3, "en")
	gone.Data["email"], kept.Data["email"], refused.Data["email"] = "nobody@nowhere.test", "someone@good.test", "x@rejected.test"
	pub.publish(t, gone, kept, refused)
	got := fb.collect(t, 4, time.Minute)
	require.Equal(t, map[string]int{"EmailSent": 2, "EmailBounced": 1, "EmailFailed": 1}, countTypes(got))
	for _, f := range got {
		if f.EventType == "EmailBounced" {
			require.Equal(t, "order-confirmed:1", f.DedupeKey)
			require.Equal(t, "failed", f.Data["status"])
			pe := f.Data["provider_event"].(map[string]any)
			require.Equal(t, "permanent", pe["bounce_type"])
			require.Equal(t, "5.1.1", pe["bounce_subtype"])
		}
	}
	require.Equal(t, "failed", s.show(t, "order-confirmed:1").Status)
	require.Equal(t, "sent", s.show(t, "order-confirmed:2").Status)
	require.Equal(t, "failed", s.show(t, "order-confirmed:3").Status)
	out, err := s.cli("suppression", "list")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^nobody@nowhere.test\s+dsn/bounce\s`, out)
	require.Regexp(t, `(?m)^x@rejected.test\s+smtp/reject\s`, out)
	require.Equal(t, 1, remote.MailCommands(), "Postfix handed the bounced mail on once")
	out, err = s.cli("suppression", "show", "nobody@nowhere.test")
	require.NoError(t, err)
	require.Contains(t, out, "dsn/bounce")
	require.Contains(t, out, "permanent bounce 5.1.1")
}
