package e2e

import (
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// vanishWait is how long a vanished leader's sessions stay open (its
// host gone without closing TCP) before its TCP peers get a reset, as when
// the host comes back. Another replica must take the relay over within it.
const vanishWait = 30 * time.Second

// faultKinds are the faults step chooses from.
const (
	faultKill = iota
	faultPause
	faultPGCut
	faultPGBlackhole
	faultMQCut
	faultSMTPHang
	faultKinds
)

// step does one fault and undoes it, except a pause, which the run loop
// ends when it is due (end bounds it). Until each kind ran once it takes
// them in a random order, then at random, kills weighted up.
func (r *chaosRig) step(rng *rand.Rand, end time.Time) {
	i := rng.IntN(2)
	if !r.pausedUntil[i].IsZero() {
		i = 1 - i // faults of a process hit the running one
	}
	if r.firstRound == nil {
		r.firstRound = rng.Perm(faultKinds)
	}
	n := []int{faultKill, faultKill, faultKill, faultPause, faultPGCut, faultPGBlackhole, faultMQCut, faultSMTPHang}[rng.IntN(8)]
	if len(r.firstRound) > 0 {
		n, r.firstRound = r.firstRound[0], r.firstRound[1:]
	}
	if n == faultPause && (r.pausedAny() || r.vanishes == 0) {
		if len(r.firstRound) > 0 || r.counts["SIGSTOP"] == 0 {
			r.firstRound = append(r.firstRound, faultPause) // later
		}
		n = faultKill
	}
	switch n {
	case faultKill:
		r.kill(i)
	case faultPause:
		r.pause(rng, i, end)
	case faultPGCut:
		r.counts["PostgreSQL cut"]++
		r.note("cut PostgreSQL (both replicas' links)")
		r.db.Cut()
		r.lastsUntilNoticed("PostgreSQL cut")
		r.db.Restore(r.t)
		r.note("restored PostgreSQL")
	case faultPGBlackhole:
		r.counts["PostgreSQL blackhole"]++
		r.note("blackhole PostgreSQL (connections stay open, nothing forwarded)")
		for _, h := range r.holes {
			h.Blackhole()
		}
		r.lastsUntilNoticed("PostgreSQL blackhole")
		for _, h := range r.holes {
			h.Heal()
		}
		r.note("PostgreSQL answers again")
	case faultMQCut:
		r.counts["RabbitMQ cut"]++
		r.note("cut RabbitMQ")
		r.amqp.Cut()
		r.lastsUntilNoticed("RabbitMQ cut")
		r.amqp.Restore(r.t)
		r.note("restored RabbitMQ")
	default:
		r.counts["SMTP replies lost"] += 2
		r.smtp.Inject(smtptest.Data, smtptest.Hang(), smtptest.Hang())
		r.note("SMTP: the next two messages are taken and their replies never sent")
	}
}

// kill SIGKILLs replica i, records the sends it had started and not
// recorded, and restarts it.
func (r *chaosRig) kill(i int) {
	f := r.newFault("SIGKILL", i)
	r.procs[i].Kill()
	r.capture(f)
	r.procs[i] = r.serve(i)
	r.capture(f) // a mark in flight at the kill has landed by now
	r.note("SIGKILL process %d (%s): %d sends started and unrecorded %v; restarted", i, f.worker, len(f.inflight), keys(f.inflight))
}

// pause SIGSTOPs replica i for longer than the lease: sometimes within the
// janitor's grace (the owner records when it wakes), sometimes past it
// (the janitor judges its started sends while it sleeps).
func (r *chaosRig) pause(rng *rand.Rand, i int, end time.Time) {
	d := chaosLease + time.Duration(2000+rng.IntN(int(chaosGrace/time.Millisecond)+8000))*time.Millisecond
	d = min(d, time.Until(end))
	if d < chaosLease+2*time.Second {
		return
	}
	f := r.newFault("SIGSTOP", i)
	_ = r.procs[i].Cmd.Process.Signal(syscall.SIGSTOP)
	r.capture(f)
	r.pausedUntil[i], r.pauseOf[i] = time.Now().Add(d), f
	r.note("SIGSTOP process %d (%s) for %s: %d sends started and unrecorded", i, f.worker, d.Round(time.Millisecond), len(f.inflight))
}

func (r *chaosRig) pausedAny() bool {
	return !r.pausedUntil[0].IsZero() || !r.pausedUntil[1].IsZero()
}

// resumeDue SIGCONTs the paused process whose pause is over; while it
// sleeps it captures its started sends again (one whose mark was on its
// way at the SIGSTOP has landed).
func (r *chaosRig) resumeDue() {
	for i, until := range r.pausedUntil {
		if until.IsZero() {
			continue
		}
		f := r.pauseOf[i]
		r.capture(f)
		if time.Now().Before(until) {
			continue
		}
		_ = r.procs[i].Cmd.Process.Signal(syscall.SIGCONT)
		r.pausedUntil[i], r.pauseOf[i] = time.Time{}, nil
		r.note("SIGCONT process %d after %s: %d sends had started and were unrecorded %v", i,
			time.Since(f.at).Round(time.Millisecond), len(f.inflight), keys(f.inflight))
	}
}

// vanishLeader makes the relay leader's host vanish: its database link
// blackholed (nothing forwarded, its close swallowed, so PostgreSQL keeps
// its sessions), then SIGKILL. It measures how long until the other
// replica leads the relay; after vanishWait the vanished host's
// connections are reset.
func (r *chaosRig) vanishLeader() {
	l := r.leader(10 * time.Second)
	if l < 0 {
		r.note("no relay leader within 10s; the vanish is tried later")
		return
	}
	r.vanishes++
	other := 1 - l
	r.holes[l].Blackhole()
	f := r.newFault("vanish", l)
	r.procs[l].Kill()
	r.capture(f)
	r.note("leader process %d (%s) vanished: database link blackholed, SIGKILL; %d sends started and unrecorded %v",
		l, f.worker, len(f.inflight), keys(f.inflight))
	took := r.awaitLeader(other, f.at.Add(vanishWait))
	r.capture(f)
	r.holes[l].Reset()
	outcome := fmt.Sprintf("process %d took the relay over %s after the vanish", other, time.Since(f.at).Round(100*time.Millisecond))
	if !took {
		r.t.Errorf("the relay leader's host vanished and process %d did not take the relay over within %s", other, vanishWait)
		reset := time.Since(f.at)
		took = r.awaitLeader(other, time.Now().Add(30*time.Second))
		outcome = fmt.Sprintf("no takeover within %s; the vanished host's connections were reset after %s and process %d took over %s after the vanish",
			vanishWait, reset.Round(100*time.Millisecond), other, time.Since(f.at).Round(100*time.Millisecond))
		if !took {
			outcome = "no takeover, not even after the vanished host's connections were reset"
		}
	}
	r.takeover = append(r.takeover, outcome)
	r.note("relay: %s", outcome)
	r.procs[l] = r.serve(l)
	r.note("restarted process %d", l)
}

// leader returns the replica that reports mailsvc_relay_leader 1, waiting
// up to within; -1 when none does.
func (r *chaosRig) leader(within time.Duration) int {
	leader := -1
	waitUntil(within, func() bool {
		for i, p := range r.procs {
			if r.pausedUntil[i].IsZero() && isLeader(p) {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// awaitLeader reports whether replica i leads the relay before deadline.
func (r *chaosRig) awaitLeader(i int, deadline time.Time) bool {
	return waitUntil(time.Until(deadline), func() bool { return isLeader(r.procs[i]) })
}

// waitUntil polls cond every 100 ms until it holds (true) or within
// passed (false).
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// lastsUntilNoticed keeps an outage in force until every running replica
// reports it (/readyz not ready: its database or broker check failed), so
// that each outage is one the replicas lived through. A replica that never
// notices within 20 s fails the test.
func (r *chaosRig) lastsUntilNoticed(what string) {
	noticed := waitUntil(20*time.Second, func() bool {
		for i, p := range r.procs {
			if r.pausedUntil[i].IsZero() && ready(p) {
				return false
			}
		}
		return true
	})
	if !noticed {
		r.t.Errorf("%s: a replica still reported ready after 20 s", what)
	}
	r.note("%s noticed by every running replica", what)
}

// ready reports whether p's /readyz answers 200.
func ready(p *e2etest.Proc) bool {
	resp, err := metricsClient.Get(p.HTTPURL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

var metricsClient = &http.Client{Timeout: time.Second}

// isLeader reads p's mailsvc_relay_leader gauge.
func isLeader(p *e2etest.Proc) bool {
	resp, err := metricsClient.Get(p.HTTPURL + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "mailsvc_relay_leader 1" {
			return true
		}
	}
	return false
}
