// Package docblock is for the tests that run or parse a block of a
// Markdown document (docs/...): a snippet, a manifest, so that what a
// page shows is what the tests check.
package docblock

import (
	"os"
	"strings"
	"testing"
)

// Find returns the content of the first fenced block of language lang
// ("```" + lang) in the Markdown file path that comes after the text mark
// ("" for the file's first such block), without its fences. It fails the
// test if the file cannot be read or has no such block.
func Find(t testing.TB, path, mark, lang string) string {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), mark)
	_, rest, ok2 := strings.Cut(rest, "```"+lang+"\n")
	block, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		if mark == "" {
			t.Fatalf("%s has no %s block", path, lang)
		}
		t.Fatalf("%s has no %s block after %q", path, lang, mark)
	}
	return block
}
