package bounded

import (
	"strconv"
	"unicode/utf8"
)

// QuoteMax is how much of a client's input an error message quotes.
const QuoteMax = 128

// Quote is s quoted for an error message. Input longer than QuoteMax bytes
// is cut at a character boundary and its length said: an answer never
// echoes a client's megabytes back (nor a log line holds them).
func Quote(s string) string {
	if len(s) <= QuoteMax {
		return strconv.Quote(s)
	}
	cut := QuoteMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
