package service

import "github.com/codecage/codecage/internal/bounded"

// QuoteMax is how much of a client's input an error message quotes.
const QuoteMax = bounded.QuoteMax

// Quote is s quoted for an error message (bounded.Quote: the session
// package quotes with it too).
func Quote(s string) string { return bounded.Quote(s) }
