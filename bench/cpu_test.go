package bench

// CPU and memory accounting for the benchmarks, read from Linux's /proc:
// the whole pipeline's CPU is the pipeline process's (mailsvc serve, or the
// raw baseline's child process) plus PostgreSQL's plus RabbitMQ's, which
// must run on this machine.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// cpuUse is CPU time (user + system) by where it was spent (which
// processes: cpuSnapshot).
type cpuUse struct {
	postgres time.Duration // the PostgreSQL server, every process of it
	rabbitmq time.Duration // the RabbitMQ server
	pipeline time.Duration // the pipeline process alone
	// postgresOwn is the part of postgres spent by the backends serving
	// the pipeline process's connections: the rest is the server's
	// background work, and anyone else's use of the same server.
	postgresOwn time.Duration
	// steal and machine are the machine's stolen CPU time (time its
	// hypervisor ran other guests while this one had work) and all of
	// its CPU time, summed over its cores (/proc/stat): see stealShare.
	steal, machine time.Duration
}

// stealShare is the part of the machine's CPU time that was stolen over
// the measured window (0..1; 0 where nothing was read). Stolen time is in
// no process's utime or stime, but a guest that loses its cores also
// loses their caches: a run with more than stealSpoils of it spends more
// CPU per mail than the same code on a quiet host, so its CPU figures are
// not comparable with a quiet run's (docs/benchmarks.md, "Reading a run:
// stolen time").
func (c cpuUse) stealShare() float64 {
	if c.machine <= 0 {
		return 0
	}
	return float64(c.steal) / float64(c.machine)
}

// stealSpoils is the stolen share above which a run's CPU figures are
// flagged as not comparable (5 %).
const stealSpoils = 0.05

// total is the whole pipeline's CPU: PostgreSQL + RabbitMQ + the pipeline
// process (postgresOwn is a part of postgres).
func (c cpuUse) total() time.Duration { return c.postgres + c.rabbitmq + c.pipeline }

func (c cpuUse) add(o cpuUse) cpuUse {
	return cpuUse{c.postgres + o.postgres, c.rabbitmq + o.rabbitmq, c.pipeline + o.pipeline, c.postgresOwn + o.postgresOwn,
		c.steal + o.steal, c.machine + o.machine}
}

// div divides every part by n (CPU per mail with n mails); the stolen
// share is unchanged.
func (c cpuUse) div(n int) cpuUse {
	d := time.Duration(n)
	return cpuUse{c.postgres / d, c.rabbitmq / d, c.pipeline / d, c.postgresOwn / d, c.steal / d, c.machine / d}
}

// cpuSample is the CPU time used up to one moment (cpuSnapshot).
type cpuSample struct {
	postgres, rabbitmq, pipeline int64 // clock ticks
	// backends are the ticks of each backend (by pid) that served a
	// connection of the pipeline process then.
	backends map[int]int64
	// steal and machine are the machine's stolen and total ticks over all
	// cores since boot (readMachineTicks).
	steal, machine int64
}

// since returns the CPU time spent from a to s. A backend of the pipeline
// found in s and not in a was started in between: all of its time counts.
func (s cpuSample) since(a cpuSample) cpuUse {
	tick := clockTick()
	var own int64
	for pid, t := range s.backends {
		own += t - a.backends[pid]
	}
	return cpuUse{postgres: time.Duration(s.postgres-a.postgres) * tick, rabbitmq: time.Duration(s.rabbitmq-a.rabbitmq) * tick,
		pipeline: time.Duration(s.pipeline-a.pipeline) * tick, postgresOwn: time.Duration(own) * tick,
		steal: time.Duration(s.steal-a.steal) * tick, machine: time.Duration(s.machine-a.machine) * tick}
}

// readMachineTicks reads the machine's stolen ticks and all its ticks
// (user, nice, system, idle, iowait, irq, softirq and steal; guest time is
// in user already) over all cores since boot, from the "cpu" line of
// /proc/stat (proc(5)).
func readMachineTicks() (steal, all int64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseMachineTicks(data)
}

// parseMachineTicks is readMachineTicks on the text of /proc/stat.
func parseMachineTicks(data []byte) (steal, all int64, err error) {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: first line %q is not the cpu total with 8 times", line)
	}
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat cpu field %d: %w", i+1, err)
		}
		all += n
		if i == 7 {
			steal = n
		}
	}
	return steal, all, nil
}

// procStat is what cpuSnapshot reads of /proc/<pid>/stat; times are in
// clock ticks.
type procStat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64
}

// readProcStat reads /proc/<pid>/stat (see proc(5)); comm may hold spaces
// and parentheses, so the fields are counted from its last ')'.
func readProcStat(pid string) (procStat, error) {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return procStat{}, err
	}
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("/proc/%s/stat: no comm in %q", pid, data)
	}
	// After the comm: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%s/stat: %d fields after comm", pid, len(f))
	}
	st := procStat{comm: string(data[open+1 : end])}
	if st.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, fmt.Errorf("/proc/%s/stat field 4: %w", pid, err)
	}
	for i, p := range []*int64{&st.utime, &st.stime, &st.cutime, &st.cstime} {
		if *p, err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return procStat{}, fmt.Errorf("/proc/%s/stat field %d: %w", pid, 14+i, err)
		}
	}
	return st, nil
}

// serverProcs says which processes are PostgreSQL's and RabbitMQ's.
type serverProcs struct {
	// postmaster and beam are the processes listening on the test
	// servers' ports (0 if none of that name does: then every process of
	// the server's names on the machine counts).
	postmaster, beam int
	// how says in words what is counted.
	how string
}

// Process names (comm) of the servers' processes.
var (
	postgresComms = []string{"postgres"}
	rabbitmqComms = []string{"beam.smp", "erl_child_setup", "epmd"}
)

// findServers finds, once per test binary, the process that listens on the
// test PostgreSQL's port (the postmaster: every other PostgreSQL process is
// its child) and the one on the test RabbitMQ's (beam.smp, parent of
// erl_child_setup). Another server on the machine (a second PostgreSQL,
// say) is then not counted. In a container, the port's listener is a proxy,
// not the server: then every process of the server's names counts.
var findServers = sync.OnceValue(func() serverProcs {
	var sp serverProcs
	var how []string
	find := func(name, rawURL, defPort, comm string, pid *int, names []string) {
		port := defPort
		if u, err := url.Parse(rawURL); err == nil && u.Port() != "" {
			port = u.Port()
		}
		if l, err := listenerPID(port); err == nil && l != 0 {
			if st, err := readProcStat(strconv.Itoa(l)); err == nil && st.comm == comm {
				*pid = l
				how = append(how, fmt.Sprintf("%s = %s (pid %d, listening on port %s) and its descendants", name, comm, l, port))
				return
			}
		}
		how = append(how, fmt.Sprintf("%s = every process named %s (no %s listens on port %s here)", name,
			strings.Join(names, ", "), comm, port))
	}
	find("pg", storetest.URL(), "5432", "postgres", &sp.postmaster, postgresComms)
	find("mq", brokertest.URL(), "5672", "beam.smp", &sp.beam, rabbitmqComms)
	if sp.beam != 0 {
		how[1] += ", and epmd"
	}
	sp.how = strings.Join(how, "; ")
	return sp
})

// listenerPID returns the process holding the TCP socket that listens on
// port (decimal), from /proc/net/tcp{,6} and the processes' fd links; 0 if
// none is found.
func listenerPID(port string) (int, error) {
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(data)) {
			cols := strings.Fields(line)
			// sl local_address rem_address st ... inode(10); st 0A is LISTEN.
			if len(cols) < 10 || cols[3] != "0A" || !strings.HasSuffix(cols[1], fmt.Sprintf(":%04X", p)) {
				continue
			}
			inodes["socket:["+cols[9]+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return 0, nil
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", d.Name(), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", d.Name(), "fd", fd.Name())); inodes[l] {
				return pid, nil
			}
		}
	}
	return 0, nil
}

// cpuSnapshot reads the CPU time used so far by PostgreSQL, RabbitMQ (which
// processes: findServers) and the process pid (0: none). The difference of
// two snapshots (since) is the CPU spent between them:
//   - pid: its utime + stime (all of its threads).
//   - pid's own PostgreSQL backends: the utime + stime of each child of the
//     postmaster whose process title names, as its client, the local port
//     of a TCP socket of pid (none over a Unix socket, or without a
//     postmaster found). One that exits in the window is missed.
//   - PostgreSQL and RabbitMQ: the sum, over every live process of the
//     server, of utime + stime + cutime + cstime. A child's time enters its
//     parent's cutime + cstime when the parent reaps it, and the child
//     leaves /proc at that moment: a backend that exits in the window moves
//     from its own fields to the postmaster's, and is counted once before
//     and once after. The postmaster's cutime is the only one that grows in
//     practice (backends and autovacuum workers); beam.smp's and
//     erl_child_setup's hold RabbitMQ's port programs.
//
// A process reaped while the snapshot walks /proc may be counted twice or
// not at all; snapshots are taken while the pipeline is idle (ready, or
// settled), when no backend comes or goes. Everything the servers do is
// counted, so other users of the same servers add to the figures (the
// idle window of BenchmarkEndToEnd, and postgres - postgresOwn, show how
// much).
func cpuSnapshot(t testing.TB, pid int) cpuSample {
	t.Helper()
	sp := findServers()
	dirs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	stats := map[int]procStat{}
	children := map[int][]int{}
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(d.Name())
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // exited since ReadDir
			}
			require.NoError(t, err)
		}
		stats[p] = st
		children[st.ppid] = append(children[st.ppid], p)
	}
	all := func(st procStat) int64 { return st.utime + st.stime + st.cutime + st.cstime }
	// server sums the tree under root, plus every process named one of
	// extra; with root 0, every process named one of names.
	server := func(root int, names, extra []string) int64 {
		var sum int64
		if root == 0 {
			for _, st := range stats {
				if slices.Contains(names, st.comm) {
					sum += all(st)
				}
			}
			return sum
		}
		if _, ok := stats[root]; !ok {
			t.Fatalf("server process %d is gone (%s)", root, sp.how)
		}
		for todo := []int{root}; len(todo) > 0; {
			p := todo[len(todo)-1]
			todo = append(todo[:len(todo)-1], children[p]...)
			sum += all(stats[p])
		}
		for _, st := range stats {
			if slices.Contains(extra, st.comm) {
				sum += all(st)
			}
		}
		return sum
	}
	sample := cpuSample{
		postgres: server(sp.postmaster, postgresComms, nil),
		rabbitmq: server(sp.beam, rabbitmqComms, []string{"epmd"}),
		backends: map[int]int64{},
	}
	sample.steal, sample.machine, err = readMachineTicks()
	require.NoError(t, err)
	if pid == 0 {
		return sample
	}
	st, ok := stats[pid]
	if !ok {
		t.Fatalf("pipeline process %d is not in /proc", pid)
	}
	sample.pipeline = st.utime + st.stime
	if sp.postmaster == 0 {
		return sample
	}
	ports := tcpPorts(pid)
	for _, b := range children[sp.postmaster] {
		// The title is "postgres: <cluster>: <user> <db> <host>(<port>) <state>".
		title, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", b))
		if m := clientPort.FindSubmatch(title); m != nil && ports[string(m[1])] {
			sample.backends[b] = all(stats[b])
		}
	}
	return sample
}

// clientPort finds a backend's client port in its process title.
var clientPort = regexp.MustCompile(`\((\d+)\)`)

// tcpPorts returns the local ports (decimal) of pid's TCP sockets.
func tcpPorts(pid int) map[string]bool {
	inodes := map[string]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, _ := os.ReadDir(dir)
	for _, fd := range fds {
		if l, _ := os.Readlink(filepath.Join(dir, fd.Name())); strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	ports := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, _ := os.ReadFile(f)
		for line := range strings.Lines(string(data)) {
			// sl local_address(ip:port, hex) rem_address st ... inode(10)
			cols := strings.Fields(line)
			if len(cols) < 10 || !inodes[cols[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(cols[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports[strconv.FormatUint(p, 10)] = true
			}
		}
	}
	return ports
}

// clockTick is the unit of /proc's CPU times: 1 s / sysconf(_SC_CLK_TCK).
// Without cgo, it reads the value the kernel passes every process
// (AT_CLKTCK in /proc/self/auxv, which is where the C library's sysconf
// takes it from); 100 per second, Linux's USER_HZ on every architecture Go
// runs on, if that fails.
func clockTick() time.Duration {
	const atClkTck = 17 // AT_CLKTCK, <linux/auxvec.h>
	hz := uint64(100)
	if auxv, err := os.ReadFile("/proc/self/auxv"); err == nil {
		word := int(unsafe.Sizeof(uintptr(0)))
		read := func(b []byte) uint64 {
			if word == 4 {
				return uint64(binary.NativeEndian.Uint32(b))
			}
			return binary.NativeEndian.Uint64(b)
		}
		for i := 0; i+2*word <= len(auxv); i += 2 * word {
			if read(auxv[i:]) == atClkTck && read(auxv[i+word:]) > 0 {
				hz = read(auxv[i+word:])
				break
			}
		}
	}
	return time.Second / time.Duration(hz)
}

// peakRSS returns the process's peak resident set size (VmHWM in
// /proc/<pid>/status), in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err, "VmHWM %q", v)
			return kb * 1024
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
