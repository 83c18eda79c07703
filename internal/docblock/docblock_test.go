package docblock

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Doc\n\n```yaml\nfirst: 1\n```\n\n<!-- mark -->\n```go\nnot this\n```\n```yaml\nsecond: 2\n```\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Find(t, path, "", "yaml"); got != "first: 1\n" {
		t.Errorf("first yaml block: %q", got)
	}
	if got := Find(t, path, "<!-- mark", "yaml"); got != "second: 2\n" {
		t.Errorf("yaml block after the mark: %q", got)
	}
	if got := Find(t, path, "<!-- mark", "go"); got != "not this\n" {
		t.Errorf("go block after the mark: %q", got)
	}
}
