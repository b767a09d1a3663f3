package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const userHZ = 100

// procCPU is a process's user+system CPU seconds from /proc/PID/stat
// (fields 14 and 15, counted after the parenthesised command name).
func procCPU(pid string) (float64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

func parseProcStat(s string) (float64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields", len(f)+2)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/PID/stat: utime/stime not numbers")
	}
	return float64(u+st) / userHZ, nil
}

// machineCPU is the whole machine's busy and total CPU seconds (all
// cores) from /proc/stat's cpu line: busy is everything but idle and
// iowait.
func machineCPU() (busy, total float64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseMachineStat(string(b))
}

func parseMachineStat(s string) (busy, total float64, err error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: no cpu line")
	}
	// user nice system idle iowait irq softirq steal (guest is in user).
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: field %d: %w", i+1, err)
		}
		total += float64(n)
		if i != 3 && i != 4 {
			busy += float64(n)
		}
	}
	return busy / userHZ, total / userHZ, nil
}

// cpuSample is the CPU counters at one moment.
type cpuSample struct {
	procs       []float64 // the target's server processes
	self        float64   // this process (the load generator)
	busy, total float64   // the machine
}

func sampleCPU(pids []int) (cpuSample, error) {
	var s cpuSample
	for _, p := range pids {
		c, err := procCPU(strconv.Itoa(p))
		if err != nil {
			return s, err
		}
		s.procs = append(s.procs, c)
	}
	var err error
	if s.self, err = procCPU("self"); err != nil {
		return s, err
	}
	s.busy, s.total, err = machineCPU()
	return s, err
}

// cpuUse is CPU seconds spent over a window.
type cpuUse struct {
	Procs  []float64 `json:"server_cpu_s"`   // per server process
	Client float64   `json:"client_cpu_s"`   // the load generator
	Busy   float64   `json:"machine_busy_s"` // the whole machine, busy
	Total  float64   `json:"machine_total_s"`
}

func (u *cpuUse) add(a, b cpuSample) {
	if u.Procs == nil {
		u.Procs = make([]float64, len(a.procs))
	}
	for i := range a.procs {
		u.Procs[i] += b.procs[i] - a.procs[i]
	}
	u.Client += b.self - a.self
	u.Busy += b.busy - a.busy
	u.Total += b.total - a.total
}

func (u cpuUse) server() float64 {
	var s float64
	for _, p := range u.Procs {
		s += p
	}
	return s
}
