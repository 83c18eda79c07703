package spawn

import (
	"os"
	"strings"
)

// Tail is the end of a child's output s for an error message: trimmed of
// surrounding space, its last n bytes, after "…" when cut.
func Tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// LogTail is Tail of the log file at path (empty when it cannot be read).
func LogTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	return Tail(string(b), n)
}
