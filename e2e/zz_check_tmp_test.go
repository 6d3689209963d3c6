package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func sysBusy(b *testing.B) time.Duration {
	data, _ := os.ReadFile("/proc/stat")
	f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
	var sum int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest included in user
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		sum += n
	}
	return time.Duration(sum) * clockTick()
}

func selfCPU(b *testing.B) time.Duration {
	st, _ := readProcStat("self")
	return time.Duration(st.utime+st.stime) * clockTick()
}

func BenchmarkZZCheck(b *testing.B) {
	for _, start := range []starter{startBaseline, startMailsvc} {
		for _, paced := range []bool{false, true} {
			sys := start(b, defaultSettings, !paced)
			s0, m0 := sysBusy(b), selfCPU(b)
			t0 := time.Now()
			var cpu cpuUse
			n := benchMails
			if paced {
				_, cpu = measureLatency(b, sys, benchRate, benchSeconds)
				n = benchRate * benchSeconds
			} else {
				_, cpu = measureThroughput(b, sys, n)
			}
			busy, self := sysBusy(b)-s0, selfCPU(b)-m0
			el := time.Since(t0)
			sys.stop(b)
			b.Logf("paced=%v window=%s machine busy=%s pg=%s mq=%s proc=%s test=%s others=%s; per mail pg=%s mq=%s proc=%s",
				paced, el.Round(time.Millisecond), busy, cpu.postgres, cpu.rabbitmq, cpu.pipeline, self,
				busy-cpu.total()-self, cpu.postgres/time.Duration(n), cpu.rabbitmq/time.Duration(n), cpu.pipeline/time.Duration(n))
		}
	}
}
