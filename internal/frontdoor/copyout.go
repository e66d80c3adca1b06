package frontdoor

import (
	"io"
	"net/http"
	"time"
)

// TransferStall is how long a download may wait for its client to take
// the next piece: a client that stops reading is cut then, and its
// transfer slot freed, while a slow one that keeps reading goes on for as
// long as it needs.
const TransferStall = 30 * time.Second

// StallWriter writes to w, each write with its own deadline
// (TransferStall).
func StallWriter(w http.ResponseWriter) io.Writer {
	return stallWriter{w: w, rc: http.NewResponseController(w)}
}

type stallWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s stallWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(TransferStall))
	return s.w.Write(p)
}

// CopyOut writes r to w through one fixed buffer, each write with its own
// deadline (TransferStall).
func CopyOut(w http.ResponseWriter, r io.Reader, buf []byte) (int64, error) {
	sw := StallWriter(w)
	var n int64
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			m, werr := sw.Write(buf[:k])
			n += int64(m)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}
