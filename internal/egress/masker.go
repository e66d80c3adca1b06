package egress

import (
	"bytes"
	"io"
)

// masker reads a body with every occurrence of the secrets overwritten by
// asterisks of the same length, so a Content-Length stays true. It holds
// back the last len(longest)-1 bytes of each read until it knows they
// start no secret.
type masker struct {
	r       io.ReadCloser
	secrets [][]byte
	keep    int
	buf     []byte // read, not yet returned
	out     []byte // masked, ready to return
	eof     error
}

func newMasker(r io.ReadCloser, secrets []string) *masker {
	m := &masker{r: r}
	for _, s := range secrets {
		m.secrets = append(m.secrets, []byte(s))
		m.keep = max(m.keep, len(s)-1)
	}
	return m
}

func (m *masker) Read(p []byte) (int, error) {
	for len(m.out) == 0 {
		if m.eof != nil {
			return 0, m.eof
		}
		chunk := make([]byte, 32<<10)
		n, err := m.r.Read(chunk)
		m.buf = append(m.buf, chunk[:n]...)
		for _, s := range m.secrets {
			for i := 0; ; {
				j := bytes.Index(m.buf[i:], s)
				if j < 0 {
					break
				}
				copy(m.buf[i+j:], bytes.Repeat([]byte{'*'}, len(s)))
				i += j + len(s)
			}
		}
		ready := len(m.buf) - m.keep
		if err != nil {
			m.eof, ready = err, len(m.buf)
		}
		if ready > 0 {
			m.out = append(m.out[:0], m.buf[:ready]...)
			m.buf = append(m.buf[:0], m.buf[ready:]...)
		}
	}
	n := copy(p, m.out)
	m.out = m.out[n:]
	return n, nil
}

func (m *masker) Close() error { return m.r.Close() }
