// Package bench measures what a lock costs: the latency of an uncontended
// acquire and release, the handoff from one holder to the next, grants per
// second under contention (with an empty critical section and with a
// store write), fairness (Jain's index over the grants per client, the
// longest wait, the clients that got nothing), the time another client
// takes over from a holder that was killed or frozen, against the lease,
// and the cost of fencing as a ratio.
//
// Every figure is measured against a real lock service through the same
// backends.Locker the suite tests, never computed from a model. A point
// (a number of clients and a critical section) runs its clients for
// Options.Duration, cut into consecutive windows of equal length: the
// first is the warm-up (connections, sessions, caches) and is discarded;
// each other is a round, and every figure is given as the least, median
// and greatest of the rounds (Stat). Mutex is the same measurement on an
// in-process lock: the harness's own ceiling, printed with every table; a
// service's figures mean something only well below it.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
)

// Target is one lock to measure: how to make its clients and its counter.
type Target struct {
	// Name is the backend's name, for results and errors. Required.
	Name string
	// NewLocker makes client id's Locker of the lock named key; the Locker
	// must make every connection to the lock service through dial (see
	// suite.Client.Dial). Required.
	NewLocker func(ctx context.Context, id int, key string, dial Dialer) (backends.Locker, error)
	// NewStore opens the counter named name, created at 0 (see
	// suite.Config.NewStore); nil: the points with a store write are
	// skipped.
	NewStore func(ctx context.Context, name string, fenced bool) (fencing.Store, error)
	// Prefix starts the name of every lock and counter the bench makes.
	// Default "locksuite".
	Prefix string
	// Ceiling marks the in-process lock (Mutex): it has no server to kill
	// or freeze, so its takeover is not measured.
	Ceiling bool
	// TakeoverBound is how long a takeover waits for another client's
	// grant after the fault. Default (0): 3 × the Locker's Expiry + 2 s,
	// or 30 s for a Locker that declares no TTL, as
	// suite.Config.StallTimeout's default.
	TakeoverBound time.Duration
	_             struct{}
}

// Section is a critical section of a point.
type Section string

const (
	// Empty: the holder releases at once.
	Empty Section = "empty"
	// Write: the holder reads the counter and writes it plus one, with
	// the grant's fencing token, as the suite's critical section does
	// (without its work between the two).
	Write Section = "write"
	// Hold: the holder keeps the lock for Options.Hold, doing nothing,
	// as a holder with work to do would: the waiters find it taken.
	Hold Section = "hold"
)

// Fault is how a takeover stops the holder.
type Fault string

const (
	// Killed: the holder's connections to the lock service are closed
	// and new ones refused (faults.Path.Cut), which is all a lock service
	// sees of a process killed with SIGKILL: the kernel closes its
	// sockets.
	Killed Fault = "killed"
	// Frozen: the holder's traffic is held (faults.Path.Freeze), as for a
	// process stopped with SIGSTOP: its connections stay open and silent,
	// and the service learns nothing until the lease runs out.
	Frozen Fault = "frozen"
)

// Options sizes a bench. The zero value takes every default.
type Options struct {
	// Clients are the numbers of contending clients, one point each.
	// Default 1, 4, 16, 64.
	Clients []int
	// Duration is how long each point runs, warm-up included. Default 2s.
	Duration time.Duration
	// Rounds is how many rounds each point measures, after a warm-up
	// window of the same length (so each round lasts Duration/(Rounds+1)),
	// and how many takeovers of each Fault are timed. Default 3.
	Rounds int
	// Fencing are the fencing modes of the points with a store write.
	// Default off and on.
	Fencing []bool
	// Faults are the takeovers to time. Default Killed and Frozen; set
	// NoTakeover to time none.
	Faults     []Fault
	NoTakeover bool
	// Hold, if positive, adds a point with the Hold section for each
	// number of clients from 2 on: fairness when the lock is mostly
	// taken. Default 0: none.
	Hold time.Duration
	// Progress, if not nil, is told what the bench starts and what each
	// point measured, one line at a time.
	Progress func(line string)
	_        struct{}
}

func (o Options) withDefaults() Options {
	if len(o.Clients) == 0 {
		o.Clients = []int{1, 4, 16, 64}
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.Fencing == nil {
		o.Fencing = []bool{false, true}
	}
	if o.Faults == nil {
		o.Faults = []Fault{Killed, Frozen}
	}
	if o.NoTakeover {
		o.Faults = nil
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return o
}

// Dist is a distribution of durations by its percentiles, in
// milliseconds, each over the rounds.
type Dist struct {
	P50 Stat `json:"p50_ms"`
	P90 Stat `json:"p90_ms"`
	P99 Stat `json:"p99_ms"`
	Max Stat `json:"max_ms"`
}

// Point is what one number of clients with one critical section measured.
type Point struct {
	Clients int     `json:"clients"`
	Section Section `json:"section"`
	// Fenced: the store compared the grants' fencing tokens (Write only).
	Fenced bool `json:"fenced,omitempty"`
	// HoldMS is how long each holder kept the lock (Hold only).
	HoldMS float64 `json:"hold_ms,omitempty"`
	// Rounds is how many rounds were measured, RoundMS how long each was.
	Rounds  int     `json:"rounds"`
	RoundMS float64 `json:"round_ms"`
	// Grants is how many grants the rounds counted in all.
	Grants       int  `json:"grants"`
	GrantsPerSec Stat `json:"grants_per_sec"`
	// Cycle: from a client's Acquire called to its Release returned (with
	// one client: the uncontended acquire + release latency).
	Cycle Dist `json:"cycle"`
	// Handoff: from a holder's Release returning to the next grant's
	// Acquire returning, whichever client got it; 0 when the next grant
	// came before the releasing client had its reply. Two clients or more.
	Handoff *Dist `json:"handoff,omitempty"`
	// Fairness is over the whole measured run, the rounds together.
	Fairness Fairness `json:"fairness"`
	// Jain is Jain's index over the grants per client in each round;
	// Starved how many clients got no grant in each round; LongestWaitMS
	// the longest any Acquire had waited, by its grant or by the round's
	// end, in each round.
	Jain          Stat `json:"jain"`
	Starved       Stat `json:"starved"`
	LongestWaitMS Stat `json:"longest_wait_ms"`
	// RepliesPerGrant is how many reads returned data on the clients'
	// connections to the lock service, all clients together, per grant:
	// about the replies the service sent per grant. A lock whose waiters
	// all wake on a release (a herd) has it grow with the clients; a
	// queue keeps it flat; polling makes it the polls per grant. 0 for
	// the in-process lock.
	RepliesPerGrant Stat `json:"replies_per_grant"`
	// Rejected is how many store writes the fenced store refused (a
	// holder whose lease had run out): none is expected.
	Rejected int `json:"rejected,omitempty"`
	// Errors is how many Acquires, store writes and Releases failed in
	// the rounds (the client went on after each), FirstError the first
	// of them, in the rounds or the warm-up.
	Errors     int    `json:"errors,omitempty"`
	FirstError string `json:"first_error,omitempty"`
	// Skipped says why the point did not run; Error why it failed.
	Skipped string `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Fairness is how a number of grants were shared among clients.
type Fairness struct {
	// GrantsPerClient is each client's grants.
	GrantsPerClient []int `json:"grants_per_client"`
	// Jain is Jain's index over them; Starved how many clients got none.
	Jain    float64 `json:"jain"`
	Starved int     `json:"starved"`
	// FairestJain and FewestStarved are what the same number of grants
	// spread as evenly as they go would give: in a short run a slow lock
	// cannot give each of 64 clients a grant, however fair it is.
	FairestJain   float64 `json:"fairest_jain"`
	FewestStarved int     `json:"fewest_starved"`
}

// FairnessOf is the Fairness of grants, client by client.
func FairnessOf(grants []int) Fairness {
	n, total := len(grants), 0
	for _, g := range grants {
		total += g
	}
	f := Fairness{GrantsPerClient: grants, Jain: Jain(grants), Starved: Starved(grants)}
	if n == 0 {
		return f
	}
	even := make([]int, n)
	for i := range even {
		even[i] = total / n
		if i < total%n {
			even[i]++
		}
	}
	f.FairestJain, f.FewestStarved = Jain(even), Starved(even)
	return f
}

// Takeover is how long another client took to get the lock after its
// holder was killed or frozen.
type Takeover struct {
	Fault Fault `json:"fault"`
	// TimeMS is over the rounds in which another client got the lock
	// within BoundMS of the fault; TimedOut counts the others.
	TimeMS   Stat    `json:"time_ms"`
	Rounds   int     `json:"rounds"`
	TimedOut int     `json:"timed_out,omitempty"`
	BoundMS  float64 `json:"bound_ms"`
	Skipped  string  `json:"skipped,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// Result is one lock's figures.
type Result struct {
	Backend string `json:"backend"`
	// Ceiling: the in-process lock (Mutex), the harness's ceiling.
	Ceiling bool `json:"ceiling,omitempty"`
	// LeaseMS and ExpiryMS are the Locker's TTL and Expiry
	// (backends.TTLOf); 0 when it declares none.
	LeaseMS  float64 `json:"lease_ms,omitempty"`
	ExpiryMS float64 `json:"expiry_ms,omitempty"`
	// Fence: the grants carry fencing tokens.
	Fence     bool       `json:"fence"`
	Points    []Point    `json:"points"`
	Takeovers []Takeover `json:"takeovers,omitempty"`
	// Error, if not empty, is why the lock could not be measured at all.
	Error string `json:"error,omitempty"`
}

// Point returns r's point for clients and section (and, for Write, the
// fencing mode), and whether it ran.
func (r Result) Point(clients int, sec Section, fenced bool) (Point, bool) {
	for _, p := range r.Points {
		if p.Clients == clients && p.Section == sec && p.Fenced == (fenced && sec == Write) {
			return p, p.Skipped == "" && p.Error == "" && p.Rounds > 0
		}
	}
	return Point{}, false
}

// FencingOverhead is the median grants per second of the fenced store
// writes over the unfenced ones, with clients clients: below 1 is what
// fencing costs. ok is false unless both points ran.
func (r Result) FencingOverhead(clients int) (ratio float64, ok bool) {
	on, ok1 := r.Point(clients, Write, true)
	off, ok2 := r.Point(clients, Write, false)
	if !ok1 || !ok2 || off.GrantsPerSec.Median == 0 {
		return 0, false
	}
	return on.GrantsPerSec.Median / off.GrantsPerSec.Median, true
}

// Takeover returns r's takeover for fault f, and whether it was timed.
func (r Result) Takeover(f Fault) (Takeover, bool) {
	for _, t := range r.Takeovers {
		if t.Fault == f {
			return t, t.Skipped == "" && t.Error == "" && t.Rounds > t.TimedOut
		}
	}
	return Takeover{}, false
}

// Machine is where a bench ran.
type Machine struct {
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Go         string `json:"go"`
	OS         string `json:"os"`
	// LoadBefore and LoadAfter are the 1, 5 and 15 minute load averages
	// when the bench began and ended (empty where the system gives none).
	LoadBefore []float64 `json:"load_before,omitempty"`
	LoadAfter  []float64 `json:"load_after,omitempty"`
}

// String is m in one line: cores, GOMAXPROCS, OS, Go, and the load
// averages known.
func (m Machine) String() string {
	s := fmt.Sprintf("%d cores (GOMAXPROCS %d), %s, %s", m.Cores, m.GOMAXPROCS, m.OS, m.Go)
	if len(m.LoadBefore) == 3 {
		s += fmt.Sprintf("; load average %.2f %.2f %.2f before", m.LoadBefore[0], m.LoadBefore[1], m.LoadBefore[2])
	}
	if len(m.LoadAfter) == 3 {
		s += fmt.Sprintf(", %.2f %.2f %.2f after", m.LoadAfter[0], m.LoadAfter[1], m.LoadAfter[2])
	}
	return s
}

// ThisMachine describes this machine now (LoadAfter empty).
func ThisMachine() Machine {
	return Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, LoadBefore: LoadAverage()}
}

// LoadAverage is the system's 1, 5 and 15 minute load averages
// (/proc/loadavg), or nil where there is none.
func LoadAverage() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return nil
	}
	var out []float64
	for _, s := range f[:3] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// Report is a whole bench: where it ran, how it was sized, every lock's
// figures (the ceiling's first).
type Report struct {
	Machine    Machine  `json:"machine"`
	DurationMS float64  `json:"duration_ms"` // per point, warm-up included
	Rounds     int      `json:"rounds"`
	Clients    []int    `json:"clients"`
	Results    []Result `json:"results"`
	// Status, when not empty, says the bench is incomplete.
	Status string `json:"status,omitempty"`
}

// NewReport is an empty Report for o on this machine.
func NewReport(o Options) Report {
	o = o.withDefaults()
	return Report{Machine: ThisMachine(), DurationMS: ms(o.Duration), Rounds: o.Rounds, Clients: o.Clients}
}

// newRunID names one bench's locks and counters apart from another's.
func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// keyOf is the name of a lock or counter of target t in run id.
func keyOf(t Target, id, what string) string {
	p := t.Prefix
	if p == "" {
		p = "locksuite"
	}
	return fmt.Sprintf("%s/bench-%s/%s/%s", p, id, t.Name, what)
}
