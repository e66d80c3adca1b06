package snapstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"runtime"
	"sync"
)

// Chunked MACs, for the files of a file set (a memory image is hundreds of
// megabytes, and one HMAC-SHA256 stream runs at about 1 GB/s here): each
// chunk of the file is MACed on its own, bound to its index, and the
// file's MAC is the MAC of the chunks' MACs and the size. The chunks of a
// file read at random (a local file) are MACed on every core at once; a
// stream (PostgreSQL) computes the same MAC chunk after chunk.

// fileChunk is the chunk size of a file set's MACs.
const fileChunk = 16 << 20

const (
	chunkDomain = "codecage snapshot chunk v1"
	fileDomain  = "codecage snapshot file v1"
)

// chunkMAC is the MAC of chunk i of blob name.
func (s *Store) chunkMAC(owner, id, name string, i int64, data []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	writeFields(h, chunkDomain, owner, id, name)
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(i)))
	h.Write(data)
	return h.Sum(nil)
}

// fileMAC is the MAC of a file of size bytes whose chunks have the MACs
// chunks, in order.
func (s *Store) fileMAC(owner, id, name string, size int64, chunks [][]byte) []byte {
	h := hmac.New(sha256.New, s.key)
	writeFields(h, fileDomain, owner, id, name)
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(size)))
	for _, c := range chunks {
		h.Write(c)
	}
	return h.Sum(nil)
}

// writeFields writes each field length-prefixed, so none can run into the
// next.
func writeFields(h hash.Hash, fields ...string) {
	for _, f := range fields {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(f))))
		h.Write([]byte(f))
	}
}

// macAt computes the chunked MAC of the size bytes of r, its chunks on
// every core at once. A short read is ErrTampered.
func (s *Store) macAt(owner, id, name string, r io.ReaderAt, size int64) ([]byte, error) {
	n := (size + fileChunk - 1) / fileChunk
	chunks := make([][]byte, n)
	errs := make([]error, n)
	next := make(chan int64)
	var wg sync.WaitGroup
	for range min(int64(runtime.GOMAXPROCS(0)), max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, min(fileChunk, size)) // a small file: a small buffer
			for i := range next {
				want := min(fileChunk, size-i*fileChunk)
				k, err := r.ReadAt(buf[:want], i*fileChunk)
				if int64(k) < want {
					if err == nil || err == io.EOF {
						err = fmt.Errorf("%w: blob %s is shorter than sealed", ErrTampered, name)
					}
					errs[i] = err
					continue
				}
				chunks[i] = s.chunkMAC(owner, id, name, i, buf[:want])
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return s.fileMAC(owner, id, name, size, chunks), nil
}

// chunkedMAC computes the chunked MAC of a stream as its bytes pass.
type chunkedMAC struct {
	s               *Store
	owner, id, name string
	buf             []byte
	chunks          [][]byte
	size            int64
}

func (s *Store) newChunkedMAC(owner, id, name string) *chunkedMAC {
	return &chunkedMAC{s: s, owner: owner, id: id, name: name}
}

func (c *chunkedMAC) Write(p []byte) (int, error) {
	n := len(p)
	c.size += int64(n)
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, fileChunk)
		}
		k := copy(c.buf[len(c.buf):cap(c.buf)], p)
		c.buf, p = c.buf[:len(c.buf)+k], p[k:]
		if len(c.buf) == fileChunk {
			c.flush()
		}
	}
	return n, nil
}

func (c *chunkedMAC) flush() {
	if len(c.buf) > 0 {
		c.chunks = append(c.chunks, c.s.chunkMAC(c.owner, c.id, c.name, int64(len(c.chunks)), c.buf))
		c.buf = c.buf[:0]
	}
}

// Sum is the MAC of what was written.
func (c *chunkedMAC) Sum() []byte {
	c.flush()
	return c.s.fileMAC(c.owner, c.id, c.name, c.size, c.chunks)
}
