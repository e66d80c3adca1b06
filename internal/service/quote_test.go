package service

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// An error message quotes a short prefix of a long input, cut on a
// character boundary, with its length; short input is quoted whole.
func TestQuoteIsShort(t *testing.T) {
	if got := Quote("a b"); got != `"a b"` {
		t.Errorf("Quote of a short string: %s", got)
	}
	long := strings.Repeat("é", 1<<20) // 2 MiB
	got := Quote(long)
	if len(got) > QuoteMax+64 || !strings.Contains(got, "(2097152 bytes)") || !utf8.ValidString(got) || strings.Contains(got, `\x`) {
		t.Errorf("Quote of 2 MiB: %d bytes: %.200s", len(got), got)
	}
}
