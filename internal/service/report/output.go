package report

import (
	"bytes"
	"sync"
)

// Output collects what a sandbox writes from two pipes at once (pip's
// log, a probe's answer), for the report of how it ended.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Tail is the last n bytes of s, after an ellipsis when s is longer.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
