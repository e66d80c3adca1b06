package sandbox

import (
	"bytes"
	"io"
	"sync"
)

// lineTee passes a run's output on to buf and, one complete line at a
// time, to onLine: how surfaces stream output while the code still runs.
type lineTee struct {
	mu      sync.Mutex
	buf     io.Writer
	stream  string
	onLine  func(stream, line string)
	partial []byte
}

func newLineTee(buf io.Writer, stream string, onLine func(stream, line string)) io.Writer {
	if onLine == nil {
		return buf
	}
	return &lineTee{buf: buf, stream: stream, onLine: onLine}
}

// Write implements io.Writer.
func (t *lineTee) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.buf.Write(p)
	t.partial = append(t.partial, p[:n]...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		t.onLine(t.stream, string(t.partial[:i+1]))
		t.partial = t.partial[i+1:]
	}
	if len(t.partial) > 64<<10 {
		// A line without end: pass it on in pieces rather than hold it.
		t.onLine(t.stream, string(t.partial))
		t.partial = t.partial[:0]
	}
	return n, err
}
