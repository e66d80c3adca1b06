package envbuild

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// tailBytes is how much of a build's output is kept for its error.
const tailBytes = 16 << 10

// maxErrorLines bounds the tool's lines quoted in a build's error.
const maxErrorLines = 8

// tail passes a build's output on to the caller's log, serialized (the
// tool and the proxy write at once), and keeps its end for the error.
type tail struct {
	mu  sync.Mutex
	out io.Writer
	buf []byte
}

func newTail(out io.Writer) *tail {
	if out == nil {
		out = io.Discard
	}
	return &tail{out: out}
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
	// A log that fails (a client gone) does not fail the build.
	_, _ = t.out.Write(p)
	return len(p), nil
}

// reason is what the tool said about its failure: its error lines (apt's
// "E: ...", buildah's "Error: ..."), else its last lines.
func (t *tail) reason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, []byte("?")))), "\n")
	var errs []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "E: ") || strings.HasPrefix(l, "Error: ") || strings.HasPrefix(l, "error ") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		errs = lines
	}
	if len(errs) > maxErrorLines {
		errs = errs[len(errs)-maxErrorLines:]
	}
	for i, l := range errs {
		if len(l) > 512 {
			errs[i] = l[:512] + "..."
		}
	}
	return strings.Join(errs, "; ")
}
