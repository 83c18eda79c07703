package selfcheck_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/suite"
)

// asyncServers stands for a lock service that replicates asynchronously
// (suite.Lagger). The specs are only walked, never run: nothing calls it.
type asyncServers struct{}

func (asyncServers) Members() []suite.Member                      { return nil }
func (asyncServers) Healthy(context.Context) error                { return nil }
func (asyncServers) Leader(context.Context) (suite.Member, error) { return nil, nil }
func (asyncServers) Lag(context.Context) (func() error, error)    { return nil, nil }

// verb is the expectation a spec's text announces: "keeps …" and "does not
// …" promise the invariant, "loses …" a lost update, "measures …" only a
// verdict.
func verb(text string) suite.Expectation {
	switch {
	case strings.HasPrefix(text, "keeps "), strings.HasPrefix(text, "does not "):
		return suite.Keeps
	case strings.HasPrefix(text, "loses "):
		return suite.Loses
	case strings.HasPrefix(text, "measures "):
		return suite.Measures
	}
	return 0
}

// TestSpecTextsSayWhatTheyAssert walks the spec tree that GinkgoTest
// registers for every kind of Config (fenced or not, ExpectLoss or not, a
// service that replicates asynchronously or not) without running it, and
// checks each spec's text against what its spec asserts (the scenario's
// Expect for that Config, which the spec's body asserts), and against
// Config.ExpectLoss's documented meaning: without it, or fenced, every
// spec but the control promises the invariant; with it, unfenced, none
// promises what its run may not deliver, and for a lock unsafe by design
// (Config.Unsafe) none promises the invariant (nor, in every Config, the
// Locker's contract).
func TestSpecTextsSayWhatTheyAssert(t *testing.T) {
	mk := func(name string, fenced, loss bool, servers suite.Servers) suite.Config {
		cfg := suite.NewConfig()
		cfg.Name, cfg.Fenced, cfg.ExpectLoss, cfg.Servers = name, fenced, loss, servers
		cfg.NewLocker = func(context.Context, suite.Client) (backends.Locker, error) { panic("not run") }
		cfg.NewStore = func(context.Context, string, bool) (fencing.Store, error) { panic("not run") }
		return cfg
	}
	cfgs := map[string]suite.Config{}
	for _, c := range []suite.Config{
		mk("plain", false, false, nil),
		mk("loss", false, true, nil),
		mk("loss-async", false, true, asyncServers{}),
		mk("plain-async", false, false, asyncServers{}),
		mk("fenced", true, true, asyncServers{}),
		renamed(mk("renamed", true, false, nil)),
		unsafe(mk("unsafe", false, true, nil)),
		unsafe(mk("unsafe-fenced", true, true, nil)),
		unsafe(mk("unsafe-plain", true, false, nil)), // as the CLI runs fenced: ExpectLoss off
	} {
		cfgs[c.Name] = c
		suite.GinkgoTest(&c)
	}
	scenarios := map[string]suite.Scenario{}
	for _, sc := range suite.Scenarios() {
		scenarios[sc.Name] = sc
	}
	seen := map[string]int{}
	for _, r := range PreviewSpecs("spec texts").SpecReports {
		if r.LeafNodeType != types.NodeTypeIt {
			continue
		}
		labels := r.Labels()
		var cfg suite.Config
		var sc suite.Scenario
		var okC, okS bool
		for _, l := range labels {
			if c, ok := cfgs[l]; ok && !okC { // the first: Name ("fenced" is a Config's name, and a label)
				cfg, okC = c, true
			}
			if s, ok := scenarios[l]; ok {
				sc, okS = s, true
			}
		}
		if !okC || !okS {
			t.Errorf("spec %q (labels %v): no Config or scenario label", r.LeafNodeText, labels)
			continue
		}
		seen[cfg.Name]++
		want := sc.Expect(&cfg)
		if got := verb(r.LeafNodeText); got != want {
			t.Errorf("%s, %s: the spec's text %q announces expectation %d, but the spec asserts %d", cfg.Name, sc.Name, r.LeafNodeText, got, want)
		}
		// ExpectLoss's documented meaning.
		switch {
		case sc.Name == suite.Control:
			if want != suite.Loses {
				t.Errorf("%s: the control must assert a lost update", cfg.Name)
			}
		case sc.Name == suite.Contract && cfg.Unsafe != "":
			if want != suite.Measures {
				t.Errorf("%s, contract: a lock unsafe by design, in every Config, must measure its contract; it asserts %d", cfg.Name, want)
			}
		case cfg.Fenced || !cfg.ExpectLoss:
			if want != suite.Keeps {
				t.Errorf("%s, %s: fenced or without ExpectLoss, every scenario must keep the invariant; it asserts %d", cfg.Name, sc.Name, want)
			}
		case cfg.Unsafe != "":
			if want == suite.Keeps {
				t.Errorf("%s, %s: a lock unsafe by design, unfenced with ExpectLoss, must not be promised the invariant", cfg.Name, sc.Name)
			}
		}
		if !strings.Contains(strings.Join(labels, ","), sc.Name) || (sc.Family != "" && !containsLabel(labels, sc.Family)) {
			t.Errorf("%s, %s: labels %v lack the scenario or its family", cfg.Name, sc.Name, labels)
		}
	}
	// A Config's Service is a label: docs/your-lock.md's filter by service
	// selects the renamed Config's fenced specs.
	filter, err := types.ParseLabelFilter("redis && fenced")
	if err != nil {
		t.Fatal(err)
	}
	matched := map[string]int{}
	for _, r := range PreviewSpecs("labels").SpecReports {
		if r.LeafNodeType == types.NodeTypeIt && filter(r.Labels()) {
			matched[r.Labels()[0]]++ // the Config's Name
		}
	}
	if len(matched) != 1 || matched["renamed"] != len(scenarios) {
		t.Errorf("the filter redis && fenced selects %v, want every spec of the renamed Config (Service redis) and nothing else", matched)
	}
	for name := range cfgs {
		if seen[name] != len(scenarios) {
			t.Errorf("%s: %d specs, want one per scenario (%d)", name, seen[name], len(scenarios))
		}
	}
}

// renamed is cfg on the service "redis", as suite/local's ConfigFor makes it.
func renamed(cfg suite.Config) suite.Config {
	cfg.Service = "redis"
	return cfg
}

// unsafe is cfg for a lock that can grant twice with no fault (a session
// lock through a transaction pooler).
func unsafe(cfg suite.Config) suite.Config {
	cfg.Unsafe = "a session lock through a transaction pooler"
	return cfg
}

func containsLabel(labels []string, l string) bool {
	for _, x := range labels {
		if x == l {
			return true
		}
	}
	return false
}
