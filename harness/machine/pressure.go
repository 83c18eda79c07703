package machine

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Pressure is a reading of how loaded the machine's CPUs are, to compare
// with a later one (Since).
type Pressure struct {
	at time.Time
	// psi is the kernel's "some" CPU pressure total (µs in which at least
	// one runnable task waited for a CPU), when it has one.
	psi   uint64
	hasPS bool
	// load is the one-minute load average, where there is no PSI.
	load float64
}

// ReadPressure reads the machine's CPU pressure now: /proc/pressure/cpu
// where the kernel has PSI, else /proc/loadavg.
func ReadPressure() Pressure {
	p := Pressure{at: time.Now()}
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					p.psi, p.hasPS = n, true
				}
			}
		}
	}
	if !p.hasPS {
		if b, err := os.ReadFile("/proc/loadavg"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				p.load, _ = strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return p
}

// Since is the CPU pressure between an earlier reading and p, as a share
// from 0 to 1: with PSI, the part of the time in which some runnable task
// waited for a CPU (0.5: half the time); without, the load average beyond
// the CPUs against the CPUs (a load of 4 on 2 CPUs is 1, of 3 is 0.5),
// at most 1. Zero when the two readings cannot be compared.
func (p Pressure) Since(earlier Pressure) float64 {
	wall := p.at.Sub(earlier.at)
	if wall <= 0 {
		return 0
	}
	if p.hasPS && earlier.hasPS && p.psi >= earlier.psi {
		return min(float64(p.psi-earlier.psi)/float64(wall.Microseconds()), 1)
	}
	cpus := float64(runtime.NumCPU())
	return min(max(p.load-cpus, 0)/cpus, 1)
}

// Kind says what Since measures: "CPU pressure (PSI some)" or "load
// average beyond the CPUs".
func (p Pressure) Kind() string {
	if p.hasPS {
		return "CPU pressure (PSI some)"
	}
	return "load average beyond the CPUs"
}

// Recent is the machine's CPU pressure over about the last ten seconds,
// 0 to 1: PSI's "some avg10", else the one-minute load average beyond the
// CPUs against the CPUs.
func Recent() float64 {
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "avg10="); ok {
				if n, err := strconv.ParseFloat(v, 64); err == nil {
					return min(n/100, 1)
				}
			}
		}
	}
	return ReadPressure().Since(Pressure{at: time.Now().Add(-time.Second)})
}
