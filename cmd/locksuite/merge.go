package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
)

const mergeUsage = `Usage: locksuite merge [flags] SHARD.json|DIR...

Joins the rows of a run split into shards (locksuite run --shard I/N --json
SHARD.json, one per machine or CI job) into the run's matrix on stdout, and
its --json, --markdown and --html, as the whole run would have written them.
A directory stands for the .json files in it (not in its subdirectories),
but for merge's own --json. Every shard of the split must be given once:
merge refuses a missing shard, a shard given twice, and shards of different
splits.

Exit status: 1 when a run's verdict is not what its spec asserted or stayed
unknown (a finding), as locksuite run's; 0 otherwise; 2 for bad usage or a
file that cannot be read.

  locksuite run --shard 1/2 --json a.json     (on one machine)
  locksuite run --shard 2/2 --json b.json     (on another)
  locksuite merge --html report.html a.json b.json

Flags:
`

// merge is `locksuite merge`.
func merge(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("locksuite merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.json, "json", "", "write the merged rows as a JSON array to `FILE`")
	fs.StringVar(&o.markdown, "markdown", "", "write the merged matrix and rows as Markdown to `FILE`")
	fs.StringVar(&o.html, "html", "", "write the merged HTML report to `FILE`")
	fs.BoolVar(&o.rows, "rows", false, "print every row above the matrix")
	fs.Usage = func() {
		fmt.Fprint(stderr, mergeUsage)
		fs.PrintDefaults()
	}
	files, err := parseAll(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if len(files) == 0 {
		return &usageError{"merge: no file: give the --json of every shard (locksuite run --shard I/N --json FILE)"}
	}
	if err := checkOutputs([]output{{"json", o.json, false}, {"markdown", o.markdown, false}, {"html", o.html, false}}); err != nil {
		return err
	}
	var rows []report.Row
	shards := map[string]string{} // shard: the file it came from
	total, empty := 0, 0          // empty: files without rows (a shard can get no run)
	paths, err := mergeFiles(files, o.json)
	if err != nil {
		return &usageError{"merge: " + err.Error()}
	}
	for _, path := range paths {
		got, err := readRows(path)
		if err != nil {
			return &usageError{fmt.Sprintf("merge: %s: %v", path, err)}
		}
		if len(got) == 0 {
			empty++
			continue
		}
		s, err := shardOf(path, got)
		if err != nil {
			return &usageError{"merge: " + err.Error()}
		}
		if prev, dup := shards[s.String()]; dup {
			return &usageError{fmt.Sprintf("merge: %s and %s are both shard %s: give each shard once", prev, path, s)}
		}
		if total != 0 && s.Total != total {
			return &usageError{fmt.Sprintf("merge: %s is shard %s, but another file is a shard of %d: give the shards of one split", path, s, total)}
		}
		shards[s.String()], total = path, s.Total
		rows = append(rows, got...)
	}
	var missing []string
	for i := 1; i <= total; i++ {
		if s := (suite.Shard{Index: i, Total: total}).String(); shards[s] == "" {
			missing = append(missing, s)
		}
	}
	if len(missing) > empty {
		return &usageError{fmt.Sprintf("merge: shard %s missing: give the --json of every shard of the split", strings.Join(missing, ", "))}
	}
	report.Sort(rows, suite.Order()...)
	for _, w := range []struct {
		flag, path string
		write      func(io.Writer) error
	}{
		{"json", o.json, func(w io.Writer) error { return report.EncodeRows(w, rows) }},
		{"markdown", o.markdown, func(w io.Writer) error { return writeMarkdown(w, rows, "") }},
		{"html", o.html, func(w io.Writer) error {
			return report.WriteReport(w, report.Report{Title: "locksuite merge: " + strings.Join(files, ", "), Rows: rows,
				Env: [][2]string{{"shards", strings.Join(paths, ", ")}}, Base: filepath.Dir(o.html)})
		}},
	} {
		if w.path == "" {
			continue
		}
		if err := writeAtomic(w.path, w.write); err != nil {
			return fmt.Errorf("--%s: %w", w.flag, err)
		}
	}
	if o.rows {
		report.WriteTable(stdout, rows)
		fmt.Fprintln(stdout)
	}
	report.WriteMatrix(stdout, rows)
	if bad := findings(rows); len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(stderr, "locksuite: finding:", b)
		}
		return errFinding
	}
	return nil
}

// readRows reads a run's --json.
func readRows(path string) ([]report.Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return report.DecodeRows(f)
}

// shardOf is the one shard the rows of path came from (Row.Shard; rows
// without a shard are a whole run, 1/1).
func shardOf(path string, rows []report.Row) (suite.Shard, error) {
	var names []string
	for _, r := range rows {
		if !slices.Contains(names, r.Shard) {
			names = append(names, r.Shard)
		}
	}
	switch {
	case len(names) > 1:
		return suite.Shard{}, fmt.Errorf("%s holds rows of shards %s: give one shard's --json per file", path, strings.Join(names, ", "))
	case len(names) == 0 || names[0] == "":
		return suite.Shard{Index: 1, Total: 1}, nil
	}
	return suite.ParseShard(names[0])
}

// mergeFiles is the files args name: each file, and each directory's .json
// files (sorted; not its subdirectories', and not out, merge's own --json,
// which a later merge of the same directory would otherwise read as a
// shard).
func mergeFiles(args []string, out string) ([]string, error) {
	var files []string
	outInfo, _ := os.Stat(out) // nil: no --json, or not written yet
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil || !fi.IsDir() {
			files = append(files, a) // readRows says what is wrong with it
			continue
		}
		found, err := filepath.Glob(filepath.Join(a, "*.json"))
		if err != nil {
			return nil, err
		}
		n := 0
		for _, f := range found {
			if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && (outInfo == nil || !os.SameFile(fi, outInfo)) {
				files, n = append(files, f), n+1
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: a directory without .json files: give the directory the shards wrote their --json to", a)
		}
	}
	return files, nil
}
