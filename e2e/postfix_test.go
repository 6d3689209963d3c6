package e2e

import (
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
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

	"github.com/mailsvc/mailsvc/internal/testenv"
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
// discarded: delivered), rejected.test (refused at RCPT, 550 5.1.1),
// nowhere.test (taken, then handed to remote, an SMTP server that refuses
// it: Postfix bounces it with a report) and kept.test (handed to remote,
// which takes it), and delivers mail for
// bounceDomain, the reports it makes, to bounceAddr. It needs root
// (Postfix's master) and the postfix package (scripts/mailservers.sh
// installs it).
func startPostfix(t *testing.T, bounceDomain, bounceAddr, remote string) *postfix {
	t.Helper()
	testenv.NeedsServer(t, "a private Postfix")
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
	p := &postfix{dir: dir, conf: filepath.Join(dir, "conf"), Addr: fmt.Sprintf("127.0.0.1:%d", e2etest.FreePort(t))}
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
	e2etest.WaitListening(t, p.Addr, 20*time.Second)
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
relay_domains = good.test, nowhere.test, rejected.test, kept.test
smtpd_relay_restrictions = permit_mynetworks, reject
transport_maps = inline:{ good.test=discard:, { rejected.test = error:5.1.1 user unknown }, nowhere.test=smtp:%[4]s, kept.test=smtp:%[4]s, %[2]s=smtp:%[3]s }
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

// A real MTA between mailsvc and the world: Postfix takes twelve mails.
// It delivers four, and sends the success report asked for
// (NOTIFY=SUCCESS): each gets one EmailDelivered; it refuses four at RCPT (550 5.1.1: mailsvc fails
// them and suppresses the addresses, smtp/reject); it takes four more,
// its next hop refuses them, and Postfix sends its own delivery status
// notifications (RFC 3464) to the mails' VERP return paths, which reach
// mailsvc's bounce listener: those end failed with their EmailBounced
// and their addresses are suppressed (dsn/bounce). Every mail's final
// report is what happened to it.
func TestPostfixBounceComesBack(t *testing.T) {
	t.Parallel()
	remote := smtptest.New(t, smtptest.Options{})
	var refusals []smtptest.Fault
	for range 4 {
		refusals = append(refusals, smtptest.ReplyText(550, "5.1.1 user unknown"))
	}
	remote.Inject(smtptest.Rcpt, refusals...)
	bounces := fmt.Sprintf("127.0.0.1:%d", e2etest.FreePort(t))
	pf := startPostfix(t, "bounce.mailsvc.test", bounces, remote.Addr)
	s := e2etest.NewStack(t, pf.Addr)
	fb := e2etest.NewFeedbackQueue(t, s.Names)
	pub := e2etest.NewPublisher(t, s.Names)
	_, err := s.CLI("migrate")
	require.NoError(t, err)
	s.Serve(map[string]string{"MAILSVC_BOUNCES_ADDRESS": "bounces@bounce.mailsvc.test",
		"MAILSVC_BOUNCES_SECRET": "a-secret-of-32-bytes-for-the-tests", "MAILSVC_BOUNCES_ADDR": bounces})

	domain := map[int]string{0: "good.test", 1: "nowhere.test", 2: "rejected.test"}
	var evs []e2etest.OrderEvent
	for i := 1; i <= 12; i++ {
		ev := e2etest.Confirmed(i, "en")
		ev.Data["email"] = fmt.Sprintf("customer%d@%s", i, domain[(i-1)/4])
		evs = append(evs, ev)
	}
	pub.Publish(t, evs...)
	got := fb.Collect(t, 20, 2*time.Minute)
	require.Equal(t, map[string]int{"EmailSent": 8, "EmailDelivered": 4, "EmailBounced": 4, "EmailFailed": 4}, countTypes(got))
	last := map[string]e2etest.Feedback{}
	for _, f := range got {
		last[f.DedupeKey] = f // in publish order: each mail's final report last
	}
	for i := 1; i <= 12; i++ {
		key := fmt.Sprintf("order-confirmed:%d", i)
		f, status := last[key], show(t, s, key).Status
		switch domain[(i-1)/4] {
		case "good.test":
			require.Equal(t, "EmailDelivered", f.EventType, key, "Postfix's success report (bounces.notify asks for SUCCESS)")
			require.Equal(t, "sent", status, key)
		case "nowhere.test":
			require.Equal(t, "EmailBounced", f.EventType, key)
			require.Equal(t, "failed", status, key)
			pe := f.Data["provider_event"].(map[string]any)
			require.Equal(t, "permanent", pe["bounce_type"], key)
			require.Equal(t, "5.1.1", pe["bounce_subtype"], key)
		default:
			require.Equal(t, "EmailFailed", f.EventType, key)
			require.Equal(t, "rejected", f.Data["error_reason"], key)
			require.Equal(t, "failed", status, key)
		}
	}
	out, err := s.CLI("suppression", "list")
	require.NoError(t, err)
	require.Equal(t, 4, strings.Count(out, " dsn/bounce "), out)
	require.Equal(t, 4, strings.Count(out, " smtp/reject "), out)
	require.Equal(t, 4, remote.MailCommands(), "Postfix handed each bounced mail on once")
	out, err = s.CLI("suppression", "show", "customer5@nowhere.test")
	require.NoError(t, err)
	require.Contains(t, out, "permanent bounce 5.1.1")
}
