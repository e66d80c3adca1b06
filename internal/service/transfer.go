package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"unicode/utf8"
)

// Downloads stream from the workspace file, uploads to it: memory per
// transfer is a fixed buffer whatever the file's size, and the transfers
// in progress at once are capped (SANDBOX_MAX_TRANSFERS).
const (
	// TransferBuffer is the buffer a transfer copies through.
	TransferBuffer = 64 << 10
	// peerChunk is the most one forwarded call carries of a file read
	// from, or written to, a session of another replica.
	peerChunk = 1 << 20
)

// acquireTransfer takes one of the SANDBOX_MAX_TRANSFERS slots, or fails
// at once: a transfer holds a file and a buffer for as long as its client
// reads (or sends), so waiting for one would only pile requests up.
func (s *Service) acquireTransfer() (release func(), err error) {
	select {
	case s.transfers <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-s.transfers }) }, nil
	default:
		return nil, fmt.Errorf("%w: all %d file transfers are in progress (SANDBOX_MAX_TRANSFERS); try again shortly", ErrBusy, cap(s.transfers))
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
		err = fmt.Errorf("%w: %q ended after %d of its %d bytes", ErrChangedDuringRead, d.Info.Path, d.read, d.Info.Size)
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

// OpenFile opens path in a session's workspace for a download: its bytes
// stream from the file, up to the size it had when opened. classify asks
// whether it is text (Download.Text), which costs one more read of it.
// A session of another replica is read a chunk (peerChunk) at a time.
func (s *Service) OpenFile(ctx context.Context, id, owner, p string, classify bool) (*Download, error) {
	slot, err := s.acquireTransfer()
	if err != nil {
		return nil, err
	}
	if replica := s.remote(id); replica != "" {
		call := PeerCall{Op: OpReadRange, Owner: owner, SessionID: id, Path: p, Classify: classify}
		first, err := forward[*FileChunk](ctx, s, replica, call, nil, EventFile, "read")
		if err != nil {
			slot()
			return nil, err
		}
		rr := &remoteReader{ctx: ctx, s: s, replica: replica, call: call, size: first.Info.Size}
		rr.take(first.Data)
		return &Download{Info: first.Info, Text: first.Text, r: rr, closers: []func(){slot}}, nil
	}
	release, err := s.admit(ctx, false)
	if err != nil {
		slot()
		return nil, err
	}
	f, info, text, err := s.openRead(id, owner, p, classify)
	if err != nil {
		release()
		slot()
		return nil, err
	}
	return &Download{Info: info, Text: text, r: io.LimitReader(f, info.Size),
		closers: []func(){slot, release, func() { f.Close() }}}, nil
}

// openRead opens a regular file of the workspace and describes it.
func (s *Service) openRead(id, owner, p string, classify bool) (*os.File, FileInfo, bool, error) {
	o, err := s.open(id, owner, p, true, false)
	if err != nil {
		return nil, FileInfo{}, false, err
	}
	defer o.Close() // the file stays open without it
	if o.r == nil {
		return nil, FileInfo{}, false, fmt.Errorf("%w: %q is not a regular file", ErrBadPath, p)
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
		return nil, FileInfo{}, false, fmt.Errorf("%w: %q is not a regular file", ErrBadPath, p)
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
// asked offset (at most peerChunk bytes).
type FileChunk struct {
	Info FileInfo `json:"info"`
	Text bool     `json:"text,omitempty"`
	Data []byte   `json:"data"`
}

// readChunk reads a chunk of a file for a replica that forwards a
// download (OpReadRange).
func (s *Service) readChunk(id, owner, p string, off int64, classify bool) (*FileChunk, error) {
	f, info, text, err := s.openRead(id, owner, p, classify && off == 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := min(int64(peerChunk), max(info.Size-off, 0))
	data := make([]byte, n)
	k, err := f.ReadAt(data, off)
	if err != nil && err != io.EOF {
		return nil, fileError(p, err)
	}
	return &FileChunk{Info: info, Text: text, Data: data[:k]}, nil
}

// remoteReader reads a file of another replica's session, a chunk at a
// time: memory is one chunk whatever the file's size.
type remoteReader struct {
	ctx       context.Context
	s         *Service
	replica   string
	call      PeerCall
	off, size int64
	buf       []byte
}

func (rr *remoteReader) take(data []byte) {
	if rest := rr.size - rr.off; int64(len(data)) > rest {
		data = data[:rest] // the file grew: the download is the size it had
	}
	rr.buf = data
}

func (rr *remoteReader) Read(p []byte) (int, error) {
	if len(rr.buf) == 0 {
		if rr.off >= rr.size {
			return 0, io.EOF
		}
		call := rr.call
		call.Offset, call.Classify = rr.off, false
		chunk, err := forward[*FileChunk](rr.ctx, rr.s, rr.replica, call, nil, EventFile, "read")
		if err != nil {
			return 0, err
		}
		if len(chunk.Data) == 0 {
			return 0, io.EOF // it shrank: Download.Read says so
		}
		rr.take(chunk.Data)
	}
	n := copy(p, rr.buf)
	rr.buf = rr.buf[n:]
	rr.off += int64(n)
	return n, nil
}
