package envstore

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	gzip "github.com/klauspost/compress/gzip"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// maxTrailing caps what may follow a layer's tar end (writers pad to a
// record; anything much longer is a bomb hiding behind the tar).
const maxTrailing = 1 << 20

// layerStream is one layer's uncompressed tar, hashed as it is read so
// finish can hold the blob to its digest and the tar to its diff ID.
type layerStream struct {
	label      string
	compressed *hashReader // nil: the blob's digest is not checked (docker archive)
	digest     v1.Hash
	tar        *hashReader
	diffID     v1.Hash
	closers    []io.Closer
	format     string
}

type hashReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func newHashReader(r io.Reader) *hashReader { return &hashReader{r: r, h: sha256.New()} }

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashReader) sum() v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.h.Sum(nil))}
}

// openLayer opens l for unpacking. A docker archive's layers are read
// uncompressed through the library (their digests are computed from the
// same bytes, so only the diff ID checks them); every other source's blob
// is read raw, hashed, and decompressed here.
func openLayer(l v1.Layer, diffID v1.Hash, kind imageKind, label string) (*layerStream, error) {
	bad := func(what string, err error) error {
		return fmt.Errorf("%w: %s: %s: %v", ErrBadImage, label, what, err)
	}
	var err error
	ls := &layerStream{label: label, diffID: diffID}
	if kind == kindDocker {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, bad("open", err)
		}
		ls.closers = append(ls.closers, rc)
		ls.tar = newHashReader(rc)
		ls.format = "layer" // the library decompressed it, if it was compressed
		return ls, nil
	}
	if ls.digest, err = l.Digest(); err != nil {
		return nil, bad("digest", err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, bad("open blob "+ls.digest.String(), err)
	}
	ls.closers = append(ls.closers, rc)
	ls.compressed = newHashReader(rc)
	br := bufio.NewReaderSize(ls.compressed, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			ls.Close()
			return nil, bad("corrupt gzip", err)
		}
		ls.closers = append(ls.closers, zr)
		ls.tar = newHashReader(zr)
		ls.format = "gzip"
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		// One goroutine and a bounded window: a zstd frame may not ask
		// for gigabytes of decoder memory.
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(128<<20), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			ls.Close()
			return nil, bad("corrupt zstd", err)
		}
		ls.closers = append(ls.closers, zstdCloser{zr})
		ls.tar = newHashReader(zr)
		ls.format = "zstd"
	default:
		ls.tar = newHashReader(br)
		ls.format = "tar"
	}
	return ls, nil
}

type zstdCloser struct{ d *zstd.Decoder }

func (z zstdCloser) Close() error { z.d.Close(); return nil }

func (ls *layerStream) Read(p []byte) (int, error) {
	n, err := ls.tar.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %s: corrupt %s stream: %v", ErrBadImage, ls.label, ls.format, err)
	}
	return n, err
}

func (ls *layerStream) describe() string {
	if ls.compressed == nil {
		return "diff " + shortHash(ls.diffID) + " (tar)"
	}
	return shortHash(ls.digest) + " (" + ls.format + ")"
}

func shortHash(h v1.Hash) string {
	if len(h.Hex) > 12 {
		return h.Algorithm + ":" + h.Hex[:12]
	}
	return h.String()
}

// finish reads what follows the tar's end (bounded), then holds the
// blob to its digest and the tar to its diff ID.
func (ls *layerStream) finish() error {
	n, err := io.Copy(io.Discard, io.LimitReader(ls, maxTrailing+1))
	if err != nil {
		return err
	}
	if n > maxTrailing {
		return fmt.Errorf("%w: %s: over %d bytes follow the tar's end", ErrBadImage, ls.label, maxTrailing)
	}
	if ls.compressed != nil {
		if n, err := io.Copy(io.Discard, io.LimitReader(ls.compressed, maxTrailing+1)); err != nil {
			return fmt.Errorf("%w: %s: reading blob: %v", ErrBadImage, ls.label, err)
		} else if n > maxTrailing {
			return fmt.Errorf("%w: %s: over %d bytes follow the compressed stream", ErrBadImage, ls.label, maxTrailing)
		}
		if got := ls.compressed.sum(); got != ls.digest {
			return fmt.Errorf("%w: %s: digest mismatch: the blob named %s hashes to %s", ErrBadImage, ls.label, ls.digest, got)
		}
	}
	if got := ls.tar.sum(); got != ls.diffID {
		return fmt.Errorf("%w: %s: diff ID mismatch: the config says %s, the layer's tar hashes to %s", ErrBadImage, ls.label, ls.diffID, got)
	}
	return nil
}

// Close releases the layer's readers, innermost first.
func (ls *layerStream) Close() error {
	for i := len(ls.closers) - 1; i >= 0; i-- {
		ls.closers[i].Close()
	}
	return nil
}
