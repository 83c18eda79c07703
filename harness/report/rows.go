package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// EncodeRows writes rows as an indented JSON array: the --json format
// (WriteJSON's), to a writer.
func EncodeRows(w io.Writer, rows []Row) error {
	if rows == nil {
		rows = []Row{}
	}
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// DecodeRows reads rows as EncodeRows writes them (a JSON array), or as
// JSON Lines (one row object after another). Fields it does not know are
// ignored, so that files of other locksuite versions read; a row without
// backend or scenario is an error: the input is not locksuite's rows.
func DecodeRows(r io.Reader) ([]Row, error) {
	br := bufio.NewReader(r)
	dec := json.NewDecoder(br)
	var rows []Row
	for n := 1; ; n++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			if n == 1 {
				return nil, errors.New("empty: no JSON value")
			}
			break
		}
		if err != nil {
			return nil, err
		}
		if len(raw) > 0 && raw[0] == '[' {
			var rs []Row
			if err := json.Unmarshal(raw, &rs); err != nil {
				return nil, err
			}
			rows = append(rows, rs...)
			continue
		}
		var row Row
		if err := json.Unmarshal(raw, &row); err != nil {
			return nil, fmt.Errorf("value %d: %w", n, err)
		}
		rows = append(rows, row)
	}
	for i, r := range rows {
		if r.Backend == "" || r.Scenario == "" {
			return nil, fmt.Errorf("row %d has no backend or scenario: not the rows of locksuite run --json", i+1)
		}
	}
	return rows, nil
}
