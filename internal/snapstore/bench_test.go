package snapstore

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/codecage/codecage/internal/pgtest"
)

// A 100 MB snapshot: a 10 MB workspace and a 90 MB memory image, streamed
// in from a generator and read back (Get verifies it all first, then both
// blobs are read). Throughput: the MB/s column.
//
//	CGO_ENABLED=0 go test -run '^$' -bench . -benchtime 5x ./internal/snapstore
const (
	benchWorkspace = 10 << 20
	benchImage     = 90 << 20
)

func benchPut(b *testing.B, s *Store, id string) {
	_, err := s.Put(context.Background(), manifest("bench", id),
		BlobSource{"workspace.tar", gen(1, benchWorkspace)}, BlobSource{"pages.img", gen(2, benchImage)})
	if err != nil {
		b.Fatal(err)
	}
}

func benchStores(b *testing.B) map[string]func(b *testing.B) *Store {
	return map[string]func(b *testing.B) *Store{
		"dir": func(b *testing.B) *Store {
			s, err := Open(context.Background(), Options{Dir: b.TempDir(), Secret: testSecret})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
		"postgres": func(b *testing.B) *Store {
			srv := pgtest.Start(b)
			s, err := Open(context.Background(), Options{DSN: pgDatabase(b, srv), Secret: testSecret})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
	}
}

func BenchmarkPut100MB(b *testing.B) {
	for _, name := range []string{"dir", "postgres"} {
		b.Run(name, func(b *testing.B) {
			s := benchStores(b)[name](b)
			b.SetBytes(benchWorkspace + benchImage)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				benchPut(b, s, fmt.Sprint("p", i))
				b.StopTimer()
				if err := s.Delete(context.Background(), "bench", fmt.Sprint("p", i)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

func BenchmarkGet100MB(b *testing.B) {
	for _, name := range []string{"dir", "postgres"} {
		b.Run(name, func(b *testing.B) {
			s := benchStores(b)[name](b)
			benchPut(b, s, "g")
			b.SetBytes(benchWorkspace + benchImage)
			buf := make([]byte, copyBuf)
			for b.Loop() {
				sn, err := s.Get(context.Background(), "bench", "g")
				if err != nil {
					b.Fatal(err)
				}
				for _, blob := range []string{"workspace.tar", "pages.img"} {
					r, err := sn.Blob(blob)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.CopyBuffer(io.Discard, onlyReader{r}, buf); err != nil {
						b.Fatal(err)
					}
				}
				sn.Close()
			}
		})
	}
}
