package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU per job: the processor time the harness process (the system's client library, the
// producers and the handlers) and the server's processes spend on a workload, divided
// by its jobs. Like the WAL per job, it hardly moves with the machine's load, and it tells
// how far a rate is bounded by the two cores: a run that keeps both busy cannot go faster
// than 2 s / (client + server CPU per job).
var (
	cpuClientMetric = Metric{Key: "cpu_client", Label: "CPU per job, harness process (client)", Unit: "µs", LowerBetter: true}
	cpuServerMetric = Metric{Key: "cpu_server", Label: "CPU per job, server processes", Unit: "µs", LowerBetter: true}
	cpuBusyMetric   = Metric{Key: "cpu_busy", Label: "cores busy (client + server CPU / wall time)", Unit: "cores", LowerBetter: false}
	cpuIdleMetric   = Metric{Key: "cpu_idle", Label: "cores idle on the machine (/proc/stat)", Unit: "cores", LowerBetter: true}
)

// cpuMetrics are the CPU figures a throughput workload reports.
var cpuMetrics = []Metric{cpuClientMetric, cpuServerMetric, cpuBusyMetric, cpuIdleMetric}

// clockTick is the unit of /proc/<pid>/stat's utime and stime (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuSnap is the CPU time used so far by the harness and by each server process.
type cpuSnap struct {
	at     time.Time
	client time.Duration
	idle   time.Duration         // the machine's idle + iowait time, all cores; -1 when unknown
	server map[int]time.Duration // by pid; nil when the server's processes cannot be read
}

// cpuNow reads the harness's CPU time (getrusage) and the CPU time of the server processes
// that serve the bench database: its client backends and the server's background
// processes (WAL writer, checkpointer, autovacuum...), from /proc. A server on another
// machine (or whose /proc entries cannot be read) gives no server figure.
func (e *env) cpuNow() cpuSnap {
	s := cpuSnap{at: time.Now(), idle: machineIdle()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	rows, err := e.pool.Query(e.ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() OR backend_type <> 'client backend'`)
	if err != nil {
		return s
	}
	var pids []int
	for rows.Next() {
		var pid int32
		if rows.Scan(&pid) == nil {
			pids = append(pids, int(pid))
		}
	}
	rows.Close()
	s.server = map[int]time.Duration{}
	for _, pid := range pids {
		d, err := procCPU(pid)
		if err != nil {
			if os.IsNotExist(err) {
				continue // it ended meanwhile
			}
			s.server = nil // not readable: not this machine's process, or not ours to read
			return s
		}
		s.server[pid] = d
	}
	if len(s.server) == 0 {
		s.server = nil
	}
	return s
}

// machineIdle reads the idle and iowait time of all cores from /proc/stat, or -1.
func machineIdle() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait ...
	if len(f) < 6 || f[0] != "cpu" {
		return -1
	}
	idle, err1 := strconv.ParseInt(f[4], 10, 64)
	iowait, err2 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(idle+iowait) * clockTick
}

// procCPU reads utime + stime of process pid.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields are counted after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// After the name: state(3) ppid(4) ... utime(14) stime(15), i.e. f[11], f[12].
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(u+st) * clockTick, nil
}

// cpuPerJob adds the CPU metrics of the part of a workload between a and b, which
// handled jobs jobs, to res. A process that started in between counts from zero; one
// that ended in between is lost (a short-lived autovacuum worker, say), so the server
// figure is a floor.
func cpuPerJob(res map[string]float64, a, b cpuSnap, jobs int) {
	if jobs <= 0 {
		return
	}
	if wall := b.at.Sub(a.at); wall > 0 && a.idle >= 0 && b.idle >= 0 {
		res[cpuIdleMetric.Key] = (b.idle - a.idle).Seconds() / wall.Seconds()
	}
	client := b.client - a.client
	res[cpuClientMetric.Key] = float64(client.Microseconds()) / float64(jobs)
	if a.server != nil && b.server != nil {
		var server time.Duration
		for pid, d := range b.server {
			server += d - a.server[pid]
		}
		res[cpuServerMetric.Key] = float64(server.Microseconds()) / float64(jobs)
		if wall := b.at.Sub(a.at); wall > 0 {
			res[cpuBusyMetric.Key] = (client + server).Seconds() / wall.Seconds()
		}
	}
}
