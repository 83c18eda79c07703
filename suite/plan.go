package suite

import "github.com/locksuite/locksuite/harness/report"

// Planned is one scenario run of a Plan: a backend in one fencing mode, a
// scenario, and the run's number among Options.Repeat (from 0).
type Planned struct {
	Backend  string
	Fenced   bool
	Scenario string
	Run      int
}

// Plan is the scenario runs a suite run makes: for each backend and
// fencing mode, the selected scenarios in table order (Order), each
// Options.Repeat times, keeping those of Options.Shard. Execute registers
// its specs from it, and the CLI counts it and writes the rows of the
// backends that cannot run from it, so that both agree on every run.
type Plan []Planned

// Line names a backend in one fencing mode, as Config.Name and
// Config.Fenced do.
type Line struct {
	Backend string
	Fenced  bool
}

// Plan is o's plan for lines, in their order (a line given twice is
// planned once); an error names a scenario that o.Scenarios gives and no
// scenario has.
func (o Options) Plan(lines ...Line) (Plan, error) {
	selected, err := selectScenarios(o.Scenarios)
	if err != nil {
		return nil, err
	}
	var p Plan
	seen := map[Line]bool{}
	for _, l := range lines {
		if seen[l] {
			continue
		}
		seen[l] = true
		for _, s := range selected {
			for n := range max(o.Repeat, 1) {
				if o.Shard.Has(l.Backend, l.Fenced, s.Name, n) {
					p = append(p, Planned{l.Backend, l.Fenced, s.Name, n})
				}
			}
		}
	}
	return p, nil
}

// Of is the part of p for one backend in one fencing mode.
func (p Plan) Of(backend string, fenced bool) Plan {
	var out Plan
	for _, r := range p {
		if r.Backend == backend && r.Fenced == fenced {
			out = append(out, r)
		}
	}
	return out
}

// Skipped is one skipped row, with reason, for each run of p: the rows of
// a backend that cannot run, or of a fenced Config whose lock gives no
// token.
func (p Plan) Skipped(reason string) []report.Row {
	out := make([]report.Row, len(p))
	for i, r := range p {
		out[i] = report.Row{Backend: r.Backend, Fencing: r.Fenced, Scenario: r.Scenario, Verdict: report.Skipped, Reason: reason}
	}
	return out
}
