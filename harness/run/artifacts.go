package run

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/report"
)

// progress reports to Setup.Progress now, every second, and once more
// (Progress.Done) when done is closed.
func (fx *Fixture) progress(done <-chan struct{}, planned time.Duration) {
	if fx.Progress == nil {
		return
	}
	t0 := time.Now()
	once := func(last bool) {
		p := report.Progress{Run: fx.Key, Scenario: fx.Scenario, Elapsed: time.Since(t0), Planned: planned, Done: last}
		secs := fx.Rec.Sections()
		in := map[int]bool{}
		for _, o := range checker.Overlaps(secs) {
			in[o.A], in[o.B] = true, true
		}
		p.Sections, p.Overlaps = len(secs), len(in)
		for _, s := range secs {
			if s.Outcome == history.Rejected {
				p.Rejected++
			}
		}
		fx.Progress(p)
	}
	once(false)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			once(false)
		case <-done:
			once(true)
			return
		}
	}
}

// keep writes the run's history (a report.Timeline as JSON) and its HTML
// timeline into Setup.Artifacts, if set, and names them in the row.
func (fx *Fixture) keep(row report.Row) report.Row {
	dir := fx.Artifacts
	if dir == "" {
		return row
	}
	t := report.Timeline{Row: row, Key: fx.Key, Sections: fx.Rec.Sections(), Faults: []report.Fault{}}
	for _, s := range fx.Log.Spans() {
		t.Faults = append(t.Faults, report.Fault{Client: s.Lane, Start: s.Start, End: s.End, Kind: s.Kind, What: s.What})
	}
	base := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(fx.Key))
	for _, f := range []struct {
		ext   string
		write func(io.Writer) error
	}{{".json", t.WriteJSON}, {".html", func(w io.Writer) error { return report.WriteHTML(w, t) }}} {
		if err := writeFile(base+f.ext, f.write); err != nil {
			fmt.Fprintf(os.Stderr, "locksuite: keeping the run's %s: %v\n", f.ext, err)
			continue
		}
		row.Artifacts = append(row.Artifacts, base+f.ext)
	}
	return row
}

func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
