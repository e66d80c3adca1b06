package files

import (
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

// Downloads stream from the workspace file, uploads to it: memory per
// transfer is a fixed buffer whatever the file's size, and the transfers
// in progress at once are capped (SANDBOX_MAX_TRANSFERS).
const (
	// TransferBuffer is the buffer a transfer copies through.
	TransferBuffer = 64 << 10
	// PeerChunk is the most one forwarded call carries of a file read
	// from, or written to, a session of another replica.
	PeerChunk = 1 << 20
)

// AcquireTransfer takes one of the SANDBOX_MAX_TRANSFERS slots, or fails
// at once: a transfer holds a file and a buffer for as long as its client
// reads (or sends), so waiting for one would only pile requests up.
func (f *Files) AcquireTransfer() (release func(), err error) {
	select {
	case f.transfers <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-f.transfers }) }, nil
	default:
		return nil, fmt.Errorf("%w: all %d file transfers are in progress (SANDBOX_MAX_TRANSFERS); try again shortly", errdefs.ErrBusy, cap(f.transfers))
	}
}

// Download is a workspace file open for reading. Read it, then Close it:
// it holds one of the SANDBOX_MAX_TRANSFERS slots until then.
type Download struct {
	// Info describes the file as it was opened: reads return at most
	// Info.Size bytes (fewer, then io.ErrUnexpectedEOF, if it shrank).
	Info FileInfo
	// Text: the file is valid UTF-8 without NUL bytes (when asked for).
	Text bool

	r       io.Reader
	read    int64
	closers []func()
	once    sync.Once
}

// Read reads the file; it fails with ErrChangedDuringRead when the file
// ends short of Info.Size.
func (d *Download) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.read += int64(n)
	if err == io.EOF && d.read < d.Info.Size {
		err = fmt.Errorf("%w: %q ended after %d of its %d bytes", errdefs.ErrChangedDuringRead, d.Info.Path, d.read, d.Info.Size)
	}
	return n, err
}

// Close closes the file and frees its transfer slot.
func (d *Download) Close() error {
	d.once.Do(func() {
		for i := len(d.closers) - 1; i >= 0; i-- {
			d.closers[i]()
		}
	})
	return nil
}

// OpenDownload opens path p in se's filesystem for a download: its bytes
// stream from the file, up to the size it had when opened. classify asks
// whether it is text (Download.Text), which costs one more read of it.
// Close closes the file, then runs closers, last first (the caller's
// transfer slot and admission); so does a failure to open.
func (f *Files) OpenDownload(se *session.Session, p string, classify bool, closers ...func()) (*Download, error) {
	file, info, text, err := openRead(se, p, classify)
	if err != nil {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		return nil, err
	}
	return &Download{Info: info, Text: text, r: io.LimitReader(file, info.Size),
		closers: append(closers, func() { file.Close() })}, nil
}

// openRead opens a regular file of the workspace and describes it.
func openRead(se *session.Session, p string, classify bool) (*os.File, FileInfo, bool, error) {
	o, err := open(se, p, true, false)
	if err != nil {
		return nil, FileInfo{}, false, err
	}
	defer o.Close() // the file stays open without it
	if o.r == nil {
		return nil, FileInfo{}, false, fmt.Errorf("%w: %q is not a regular file", errdefs.ErrBadPath, p)
	}
	// O_NONBLOCK: a FIFO the code planted must not hang the server.
	f, err := o.r.OpenFile(o.rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, FileInfo{}, false, fileError(p, err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, FileInfo{}, false, fileError(p, err)
		}
		return nil, FileInfo{}, false, fmt.Errorf("%w: %q is not a regular file", errdefs.ErrBadPath, p)
	}
	info := FileInfo{Path: o.shown(o.rel), Size: st.Size(), Modified: st.ModTime().UTC(), Mode: uint32(st.Mode().Perm())}
	text := false
	if classify {
		if text, err = isText(io.NewSectionReader(f, 0, info.Size)); err != nil {
			f.Close()
			return nil, FileInfo{}, false, fileError(p, err)
		}
	}
	return f, info, text, nil
}

// isText reports whether r holds valid UTF-8 without NUL bytes, reading
// it through a fixed buffer.
func isText(r io.Reader) (bool, error) {
	buf := make([]byte, TransferBuffer)
	carry := 0 // bytes of a character cut at the end of the last read
	for {
		n, err := io.ReadFull(r, buf[carry:])
		chunk := buf[:carry+n]
		for _, b := range chunk[carry:] {
			if b == 0 {
				return false, nil
			}
		}
		end := len(chunk)
		if err == nil {
			end = completeRunes(chunk)
		}
		if !utf8.Valid(chunk[:end]) {
			return false, nil
		}
		carry = copy(buf, chunk[end:])
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return true, nil
		default:
			return false, err
		}
	}
}

// completeRunes is how much of b ends on a character boundary: an
// encoding cut at the end (at most 3 bytes) is left for the next read.
func completeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// FileChunk is a forwarded read's answer: the file, and Data from the
// asked offset (at most PeerChunk bytes).
type FileChunk struct {
	Info FileInfo `json:"info"`
	Text bool     `json:"text,omitempty"`
	Data []byte   `json:"data"`
}

// ReadChunk reads a chunk of a file of se's filesystem for a replica that
// forwards a download.
func (f *Files) ReadChunk(se *session.Session, p string, off int64, classify bool) (*FileChunk, error) {
	file, info, text, err := openRead(se, p, classify && off == 0)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	n := min(int64(PeerChunk), max(info.Size-off, 0))
	data := make([]byte, n)
	k, err := file.ReadAt(data, off)
	if err != nil && err != io.EOF {
		return nil, fileError(p, err)
	}
	return &FileChunk{Info: info, Text: text, Data: data[:k]}, nil
}

// NewChunkedDownload is the download of a file of another replica's
// session, whose first chunk has come: fetch brings the chunk at an offset
// (ReadChunk's Data, there). Memory is one chunk whatever the file's size.
// Close runs closers, last first.
func NewChunkedDownload(first *FileChunk, fetch func(off int64) ([]byte, error), closers ...func()) *Download {
	cr := &chunkReader{fetch: fetch, size: first.Info.Size}
	cr.take(first.Data)
	return &Download{Info: first.Info, Text: first.Text, r: cr, closers: closers}
}

// chunkReader reads a file a chunk at a time.
type chunkReader struct {
	fetch     func(off int64) ([]byte, error)
	off, size int64
	buf       []byte
}

func (cr *chunkReader) take(data []byte) {
	if rest := cr.size - cr.off; int64(len(data)) > rest {
		data = data[:rest] // the file grew: the download is the size it had
	}
	cr.buf = data
}

func (cr *chunkReader) Read(p []byte) (int, error) {
	if len(cr.buf) == 0 {
		if cr.off >= cr.size {
			return 0, io.EOF
		}
		data, err := cr.fetch(cr.off)
		if err != nil {
			return 0, err
		}
		if len(data) == 0 {
			return 0, io.EOF // it shrank: Download.Read says so
		}
		cr.take(data)
	}
	n := copy(p, cr.buf)
	cr.buf = cr.buf[n:]
	cr.off += int64(n)
	return n, nil
}
