package snapstore

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"sync"
)

// Snapshot is a verified snapshot, open for reading. Only Get makes one,
// and only after the seal, the owner and every blob were verified in full.
// Close it when done: it holds the backend's view (open files, or a
// database transaction).
type Snapshot struct {
	s     *Store
	m     Manifest
	v     view
	ctx   context.Context
	mu    sync.Mutex
	close bool
}

// Get verifies the owner's snapshot in full (the manifest's seal and owner,
// then every blob's size and MAC, streamed) and only then returns it for
// reading. ctx bounds the verification and the reads that follow (with
// PostgreSQL the Snapshot's transaction ends when ctx does).
func (s *Store) Get(ctx context.Context, owner, id string) (*Snapshot, error) {
	if err := checkKey(owner, id); err != nil {
		return nil, err
	}
	v, err := s.b.read(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	m, err := s.openLive(v.record(), owner, id)
	if err == nil {
		err = s.verifyBlobs(ctx, v, m)
	}
	if err != nil {
		v.close()
		return nil, err
	}
	return &Snapshot{s: s, m: m, v: v, ctx: ctx}, nil
}

// verifyBlobs reads every blob through its MAC.
func (s *Store) verifyBlobs(ctx context.Context, v view, m Manifest) error {
	buf := make([]byte, copyBuf)
	seen := map[string]bool{}
	for _, b := range m.Blobs {
		if seen[b.Name] || checkSealedName(b) != nil || b.Size < 0 {
			return fmt.Errorf("%w: bad blob entry %s", ErrTampered, quoteCap(b.Name))
		}
		seen[b.Name] = true
		if b.Chunk != 0 {
			ok, err := s.verifyAt(ctx, v, m, b)
			if err != nil {
				return err
			}
			if ok {
				continue
			}
		}
		r, err := s.blobReader(ctx, v, m, b)
		if err != nil {
			return err
		}
		_, err = io.CopyBuffer(io.Discard, onlyReader{r}, buf)
		if err != nil {
			return err
		}
	}
	return nil
}

// blobReader reads blob b from v, checking its size and MAC at the end:
// a mismatch is ErrTampered instead of io.EOF.
func (s *Store) blobReader(ctx context.Context, v view, m Manifest, b BlobInfo) (io.Reader, error) {
	want, err := hex.DecodeString(b.MAC)
	if err != nil {
		return nil, fmt.Errorf("%w: blob %s has no valid MAC", ErrTampered, b.Name)
	}
	r, err := v.blob(ctx, b.Name, b.Size)
	if err != nil {
		return nil, err
	}
	var mac macSum = plainMAC{s.blobMAC(m.Owner, m.ID, b.Name)}
	if b.Chunk != 0 {
		mac = s.newChunkedMAC(m.Owner, m.ID, b.Name)
	}
	return &macReader{ctx: ctx, r: r, left: b.Size, mac: mac, want: want, name: b.Name}, nil
}

// verifyAt verifies a chunked blob whose bytes can be read at random on
// every core at once; ok is false when they cannot (a stream).
func (s *Store) verifyAt(ctx context.Context, v view, m Manifest, b BlobInfo) (ok bool, err error) {
	want, err := hex.DecodeString(b.MAC)
	if err != nil {
		return true, fmt.Errorf("%w: blob %s has no valid MAC", ErrTampered, b.Name)
	}
	r, err := v.blob(ctx, b.Name, b.Size)
	if err != nil {
		return true, err
	}
	ra, ok := r.(io.ReaderAt)
	if !ok {
		return false, nil
	}
	got, err := s.macAt(m.Owner, m.ID, b.Name, ra, b.Size)
	if err != nil {
		return true, err
	}
	if !hmac.Equal(got, want) {
		return true, fmt.Errorf("%w: blob %s does not match its MAC", ErrTampered, b.Name)
	}
	if err := ctx.Err(); err != nil {
		return true, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return true, nil
}

// macSum is a MAC being computed: a plain HMAC, or a chunked one.
type macSum interface {
	io.Writer
	Sum() []byte
}

type plainMAC struct{ hash.Hash }

func (p plainMAC) Sum() []byte { return p.Hash.Sum(nil) }

// Manifest is the snapshot's verified manifest.
func (sn *Snapshot) Manifest() Manifest { return sn.m }

// Blob reads one blob from the start. Its bytes are those verified by Get;
// they are checked again on the way, and a change since ends the stream
// with ErrTampered.
func (sn *Snapshot) Blob(name string) (io.Reader, error) {
	sn.mu.Lock()
	closed := sn.close
	sn.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: the snapshot is closed", ErrInvalid)
	}
	for _, b := range sn.m.Blobs {
		if b.Name == name {
			return sn.s.blobReader(sn.ctx, sn.v, sn.m, b)
		}
	}
	return nil, fmt.Errorf("%w: snapshot %s has no blob %s", ErrNotFound, sn.m.ID, quoteCap(name))
}

// Close releases the snapshot's view.
func (sn *Snapshot) Close() error {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.close {
		return nil
	}
	sn.close = true
	return sn.v.close()
}

// macReader passes a blob's bytes through its MAC and checks size and MAC
// when the bytes run out.
type macReader struct {
	ctx  context.Context
	r    io.Reader
	left int64 // bytes still expected
	mac  macSum
	want []byte
	name string
	err  error
}

func (m *macReader) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	if err := m.ctx.Err(); err != nil {
		m.err = fmt.Errorf("%w: %v", ErrUnavailable, err)
		return 0, m.err
	}
	if int64(len(p)) > m.left {
		p = p[:m.left]
	}
	n := 0
	var err error
	if len(p) > 0 {
		n, err = m.r.Read(p)
		m.mac.Write(p[:n])
		m.left -= int64(n)
	}
	switch {
	case err != nil && err != io.EOF:
		m.err = err
		return n, err
	case err == io.EOF && m.left > 0:
		m.err = fmt.Errorf("%w: blob %s is %d bytes shorter than sealed", ErrTampered, m.name, m.left)
		return 0, m.err
	case m.left == 0:
		if !hmac.Equal(m.mac.Sum(), m.want) {
			m.err = fmt.Errorf("%w: blob %s does not match its MAC", ErrTampered, m.name)
			return 0, m.err // the last bytes are withheld
		}
		m.err = io.EOF
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	}
	return n, nil
}
