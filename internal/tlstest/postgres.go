package tlstest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailsvc/mailsvc/internal/testenv"
)

// PostgresOptions configure StartPostgres.
type PostgresOptions struct {
	// Server is the server's certificate (ssl_cert_file, ssl_key_file).
	Server *Leaf
	// ClientCA, when set, is ssl_ca_file: the CA whose client certificates
	// the server accepts.
	ClientCA *CA
	// User is the superuser initdb creates; "" means "postgres". With the
	// default HBA it is also the CN a client certificate must carry.
	User string
	// HBA is the whole pg_hba.conf; "" means DefaultHBA.
	HBA string
}

// DefaultHBA accepts TCP connections on 127.0.0.1 only over TLS and only
// with a client certificate whose CN is the role name (method cert);
// anything else, a plaintext connection above all, is rejected.
const DefaultHBA = "hostssl all all 127.0.0.1/32 cert\nhost all all 0.0.0.0/0 reject\n"

// Postgres is a PostgreSQL server of a test's own: its own data directory
// under the system's temporary directory, its own port on 127.0.0.1, ssl=on.
type Postgres struct {
	// Host is 127.0.0.1; Port its port; Addr both.
	Host string
	Port int
	Addr string
	// User is the superuser role.
	User string

	cmd    *exec.Cmd
	logs   *watcher
	exited <-chan error
}

// URL returns postgres://User@Addr/postgres, followed by "?"+params when
// params is not "".
func (p *Postgres) URL(params string) string {
	u := "postgres://" + p.User + "@" + p.Addr + "/postgres"
	if params != "" {
		u += "?" + params
	}
	return u
}

// Logs returns what the server logged so far.
func (p *Postgres) Logs() string { return p.logs.String() }

// StartPostgres runs initdb and a postgres with ssl=on on a free loopback
// port, and stops it and removes its directory in t.Cleanup. The server
// binaries are found in MAILSVC_TEST_PG_BINDIR, pg_config --bindir,
// /usr/lib/postgresql/*/bin or PATH; PostgreSQL refuses to run as root,
// so as root it runs as the system user "postgres". It fails the test,
// saying what to install, when it cannot run.
func StartPostgres(t testing.TB, o PostgresOptions) *Postgres {
	t.Helper()
	testenv.NeedsServer(t, "a private PostgreSQL")
	if o.User == "" {
		o.User = "postgres"
	}
	if o.HBA == "" {
		o.HBA = DefaultHBA
	}
	bin := pgBinDir(t)
	cred, uid, gid := pgCredential(t)
	dir, err := os.MkdirTemp("", "mailsvc-pgtls-")
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	files := map[string][]byte{"server.crt": o.Server.CertPEM, "server.key": o.Server.KeyPEM, "pg_hba.conf": []byte(o.HBA)}
	if o.ClientCA != nil {
		files["ca.crt"] = o.ClientCA.PEM
	}
	for name, b := range files {
		writeFile(t, dir, name, b, 0o600)
	}
	chown := []string{dir}
	for name := range files {
		chown = append(chown, filepath.Join(dir, name))
	}
	for _, p := range chown {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatalf("tlstest: chown %s: %v", p, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", o.User, "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.Dir, initdb.SysProcAttr = dir, &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("tlstest: initdb: %v\n%s", err, out)
	}
	args := []string{"-D", data, "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "ssl=on", "-c", "ssl_cert_file=" + filepath.Join(dir, "server.crt"),
		"-c", "ssl_key_file=" + filepath.Join(dir, "server.key"), "-c", "hba_file=" + filepath.Join(dir, "pg_hba.conf"),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=16MB", "-c", "max_connections=30", "-c", "log_connections=on"}
	if o.ClientCA != nil {
		args = append(args, "-c", "ssl_ca_file="+filepath.Join(dir, "ca.crt"))
	}
	for try := 1; ; try++ {
		p, err := startPostgres(bin, dir, cred, args, o.User)
		if err == nil {
			t.Cleanup(p.stop)
			return p
		}
		if !strings.Contains(err.Error(), "could not bind") || try == 3 {
			t.Fatalf("tlstest: start postgres: %v", err)
		}
	}
}

func startPostgres(bin, dir string, cred *syscall.Credential, args []string, user string) (*Postgres, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logs := &watcher{want: "database system is ready to accept connections", ready: make(chan struct{})}
	cmd := exec.Command(filepath.Join(bin, "postgres"), append(args, "-p", strconv.Itoa(port))...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p := &Postgres{Host: "127.0.0.1", Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), User: user, cmd: cmd, logs: logs}
	select {
	case <-logs.ready:
		p.exited = exited
		return p, nil
	case err := <-exited:
		return nil, fmt.Errorf("postgres exited (%w):\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("postgres not ready after 30s:\n%s", logs.String())
	}
}

// stop asks for a fast shutdown and waits for it, killing the server
// after 10 s.
func (p *Postgres) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pgBinDir finds the directory of initdb and postgres.
func pgBinDir(t testing.TB) string {
	t.Helper()
	var dirs []string
	if d := os.Getenv("MAILSVC_TEST_PG_BINDIR"); d != "" {
		dirs = append(dirs, d)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(found, func(a, b string) int { return versionOf(b) - versionOf(a) })
	dirs = append(dirs, found...)
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, "initdb")); err == nil && !st.IsDir() {
			if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
				return d
			}
		}
	}
	t.Fatalf("tlstest: PostgreSQL's server binaries (initdb, postgres) are not installed: install them " +
		"(Debian: apt-get install postgresql; `make services` does it as root) or set MAILSVC_TEST_PG_BINDIR")
	return ""
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// pgCredential is whom the server runs as: nil (this process's user)
// unless this process is root, then the system user "postgres".
func pgCredential(t testing.TB) (cred *syscall.Credential, uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, os.Getuid(), os.Getgid()
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("tlstest: PostgreSQL refuses to run as root, and there is no user \"postgres\" to run it as " +
			"(Debian's postgresql package creates it; or run the tests as another user)")
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid
}

// watcher collects the server's output and closes ready at the first line
// containing want.
type watcher struct {
	want  string
	ready chan struct{}
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
}

func (w *watcher) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(b), nil
}

func (w *watcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
