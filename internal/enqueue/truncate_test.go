package enqueue

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Truncate cuts at a character's start: a message naming a long kind, key or step name
// of multi-byte characters stays valid UTF-8 (it cut inside one before), and says it was
// cut.
func TestTruncate_CutsBetweenCharacters(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc…"},
		{strings.Repeat("é", 20), 5, "éé…"}, // 2-byte characters: 4 bytes fit in 5
		{strings.Repeat("日", 20), 32, strings.Repeat("日", 10) + "…"},
		{"日本", 2, "…"},
	} {
		got := Truncate(c.s, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
