package tempdir

import "testing"

// TestUnescapeMount: the octal escapes of /proc/self/mountinfo paths.
func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/plain`:          "/tmp/plain",
		`/tmp/a\040b`:         "/tmp/a b",
		`/tmp/tab\011x\134y`:  "/tmp/tab\tx\\y",
		`/tmp/short\04`:       `/tmp/short\04`,
		`/tmp/not\999escaped`: `/tmp/not\999escaped`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
