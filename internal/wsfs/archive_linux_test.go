package wsfs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/wsfs"
)

var roomy = wsfs.ArchiveLimits{MaxBytes: 1 << 30, MaxEntries: 200_000, MaxDepth: 64}

const owner = 1_500_012_345 // a uid no one uses

// node is what a tree holds at a path, as the host sees it.
type node struct {
	mode  fs.FileMode
	mtime int64
	data  string // a file's content or a link's target
	uid   uint32
}

// snapshotTree reads the tree under dir with plain os calls (the test's
// independent view).
func snapshotTree(t *testing.T, dir string) map[string]node {
	t.Helper()
	out := map[string]node{}
	must(t, filepath.Walk(dir, func(p string, fi fs.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		n := node{mode: fi.Mode(), mtime: fi.ModTime().Unix(), uid: fi.Sys().(*syscall.Stat_t).Uid}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			n.data, err = os.Readlink(p)
		case fi.Mode().IsRegular():
			var b []byte
			b, err = os.ReadFile(p)
			n.data = string(b)
		}
		out[rel] = n
		return err
	}))
	return out
}

func TestArchiveRoundTrip(t *testing.T) {
	src, dst := scratch(t), scratch(t)
	big := make([]byte, 5<<20)
	rand.Read(big)
	long := strings.Repeat("L", 255)
	must(t, os.MkdirAll(filepath.Join(src, "a/b/c"), 0o750))
	must(t, os.Mkdir(filepath.Join(src, "empty"), 0o700))
	must(t, os.WriteFile(filepath.Join(src, "a/b/c/big.bin"), big, 0o640))
	must(t, os.WriteFile(filepath.Join(src, "a/new\nline"), []byte("nl"), 0o600))
	must(t, os.WriteFile(filepath.Join(src, "a/bad\xff\xfeutf8"), []byte("bytes"), 0o644))
	must(t, os.MkdirAll(filepath.Join(src, long, long), 0o755))
	must(t, os.WriteFile(filepath.Join(src, long, long, long), []byte("deep long"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "setuid"), []byte("s"), 0o755))
	must(t, os.Chmod(filepath.Join(src, "setuid"), 0o755|fs.ModeSetuid))
	must(t, os.Symlink("/etc/passwd", filepath.Join(src, "passwd")))
	must(t, os.Symlink("b/c/big.bin", filepath.Join(src, "a/rel")))
	must(t, unix.Mkfifo(filepath.Join(src, "a/fifo"), 0o644))
	ln, err := net.Listen("unix", filepath.Join(src, "sock"))
	must(t, err)
	defer ln.Close()
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(src, "a/b/c/big.bin"), old, old))
	must(t, os.Chtimes(filepath.Join(src, "a/b"), old, old))
	must(t, unix.Lutimes(filepath.Join(src, "passwd"), []unix.Timeval{unix.NsecToTimeval(old.UnixNano()), unix.NsecToTimeval(old.UnixNano())}))

	var buf bytes.Buffer
	rep, err := wsfs.Archive(context.Background(), src, &buf, roomy)
	must(t, err)
	if rep.SkippedCount != 2 || !slices.Contains(rep.Skipped, `"a/fifo" (fifo)`) || !slices.Contains(rep.Skipped, `"sock" (socket)`) {
		t.Errorf("skipped: %d %q", rep.SkippedCount, rep.Skipped)
	}
	if rep.Bytes != int64(len(big))+2+5+9+1 {
		t.Errorf("bytes %d", rep.Bytes)
	}
	passwd, err := os.ReadFile("/etc/passwd")
	must(t, err)
	if first, _, _ := bytes.Cut(passwd, []byte("\n")); bytes.Contains(buf.Bytes(), first) {
		t.Errorf("the archive holds /etc/passwd's content: the link was followed")
	}

	must(t, wsfs.Unpack(context.Background(), dst, bytes.NewReader(buf.Bytes()), owner, roomy))
	want, got := snapshotTree(t, src), snapshotTree(t, dst)
	delete(want, "a/fifo")
	delete(want, "sock")
	if len(got) != len(want) || rep.Entries != len(want) {
		t.Errorf("entries: archived %d, unpacked %d, want %d", rep.Entries, len(got), len(want))
	}
	for p, w := range want {
		g, ok := got[p]
		if p == "setuid" {
			w.mode &^= fs.ModeSetuid // stripped
		}
		if !ok || g.mode != w.mode || g.data != w.data || g.mtime != w.mtime && w.mode&fs.ModeSymlink == 0 && !w.mode.IsDir() {
			t.Errorf("%q: got %v %o %d, want %o %d", p, ok, g.mode, g.mtime, w.mode, w.mtime)
		}
		if g.uid != owner {
			t.Errorf("%q: owned by %d, want %d", p, g.uid, owner)
		}
	}
	for _, p := range []string{"a/b", "a/b/c/big.bin", "passwd"} {
		if got[p].mtime != old.Unix() {
			t.Errorf("%q: mtime %d, want %d", p, got[p].mtime, old.Unix())
		}
	}
}

// TestArchiveNeverFollowsASwap swaps a file for a link to a host secret
// while archives run: the secret never lands in an archive.
func TestArchiveNeverFollowsASwap(t *testing.T) {
	base := scratch(t)
	ws, secret := filepath.Join(base, "ws"), filepath.Join(base, "secret")
	must(t, os.Mkdir(ws, 0o755))
	must(t, os.WriteFile(secret, []byte("HOST-SECRET"), 0o600))
	must(t, os.WriteFile(filepath.Join(ws, "f"), []byte("plain"), 0o644))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(ws, ".t")
			if i%2 == 0 {
				os.Symlink(secret, tmp)
			} else {
				os.WriteFile(tmp, []byte("plain"), 0o644)
			}
			os.Rename(tmp, filepath.Join(ws, "f"))
		}
	}()
	for i := 0; i < 2000; i++ {
		var buf bytes.Buffer
		if _, err := wsfs.Archive(context.Background(), ws, &buf, roomy); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(buf.Bytes(), []byte("HOST-SECRET")) {
			t.Fatalf("run %d: the archive holds the host's secret", i)
		}
	}
	close(stop)
	<-done
}

func TestArchiveLimits(t *testing.T) {
	dir := scratch(t)
	must(t, os.MkdirAll(filepath.Join(dir, "1/2/3/4"), 0o755))
	for i := range 10 {
		must(t, os.WriteFile(filepath.Join(dir, "1", "f"+string(rune('0'+i))), make([]byte, 1000), 0o644))
	}
	for _, c := range []struct {
		lim  wsfs.ArchiveLimits
		want string
	}{
		{wsfs.ArchiveLimits{MaxBytes: 5000, MaxEntries: 100, MaxDepth: 10}, "more than 5000 bytes"},
		{wsfs.ArchiveLimits{MaxBytes: 1 << 20, MaxEntries: 8, MaxDepth: 10}, "more than 8 entries"},
		{wsfs.ArchiveLimits{MaxBytes: 1 << 20, MaxEntries: 100, MaxDepth: 3}, `"1/2/3/4" is deeper than 3 levels`},
	} {
		_, err := wsfs.Archive(context.Background(), dir, io.Discard, c.lim)
		if !errors.Is(err, wsfs.ErrArchiveLimit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.lim, err, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := wsfs.Archive(ctx, dir, io.Discard, roomy); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}

// hostile builds a tar stream from headers (a regular file gets Size
// bytes of "x").
func hostile(t testing.TB, hs ...*tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must2(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	must2(t, tw.Close())
	return buf.Bytes()
}

func reg(name string) *tar.Header { return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: 4} }

func TestUnpackRefusesHostileArchives(t *testing.T) {
	deep := strings.Repeat("d/", 10_000) + "f"
	many := make([]*tar.Header, 100_000)
	for i := range many {
		many[i] = &tar.Header{Typeflag: tar.TypeDir, Name: "m" + string(rune('a'+i%26)) + "/" + strings.Repeat("n", i%50)}
	}
	lim := wsfs.ArchiveLimits{MaxBytes: 1 << 20, MaxEntries: 1000, MaxDepth: 64}
	for _, c := range []struct {
		name string
		hdrs func(outside string) []*tar.Header
		want string
	}{
		{"through planted link", func(string) []*tar.Header { return []*tar.Header{reg("p/evil")} }, `"p/evil": path through a symlink`},
		{"dotdot", func(string) []*tar.Header { return []*tar.Header{reg("../x")} }, `"../x": path with ".."`},
		{"absolute", func(o string) []*tar.Header { return []*tar.Header{reg(o + "/abs")} }, "absolute path"},
		{"inner dotdot", func(string) []*tar.Header { return []*tar.Header{reg("a/../../x")} }, `path with ".."`},
		{"through own link", func(o string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeSymlink, Name: "l", Linkname: o}, reg("l/evil")}
		}, `"l/evil": path through a symlink`},
		{"dir over own link", func(o string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeSymlink, Name: "l", Linkname: o}, {Typeflag: tar.TypeDir, Name: "l/"}}
		}, `"l": exists and is not a directory`},
		{"nested through link", func(o string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeDir, Name: "a/"}, {Typeflag: tar.TypeSymlink, Name: "a/l", Linkname: "../.."}, reg("a/l/x/y/evil")}
		}, "path through a symlink"},
		{"hard link", func(string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeLink, Name: "h", Linkname: "/etc/passwd"}}
		}, `"h": hard link`},
		{"char device", func(string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeChar, Name: "mem", Devmajor: 1, Devminor: 1}}
		}, "device"},
		{"whiteout outside a machine's root", func(string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeChar, Name: "gone"}}
		}, "device"},
		{"block device", func(string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8}}
		}, "device"},
		{"fifo", func(string) []*tar.Header { return []*tar.Header{{Typeflag: tar.TypeFifo, Name: "p"}} }, "FIFO"},
		{"deep", func(string) []*tar.Header { return []*tar.Header{reg(deep)} }, "deeper than 64 levels"},
		{"many", func(string) []*tar.Header { return many }, "more than 1000 entries"},
		{"bytes", func(string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeReg, Name: "big", Size: 2 << 20}}
		}, "more than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := scratch(t)
			ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
			must(t, os.Mkdir(ws, 0o755))
			must(t, os.Mkdir(outside, 0o755))
			if c.name == "through planted link" { // ws/p -> outside, left in ws
				must(t, os.Symlink(outside, filepath.Join(ws, "p")))
			}
			stream := hostile(t, c.hdrs(outside)...)
			start := time.Now()
			err := wsfs.Unpack(context.Background(), ws, bytes.NewReader(stream), owner, lim)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if !errors.Is(err, wsfs.ErrUnsafeEntry) && !errors.Is(err, wsfs.ErrArchiveLimit) {
				t.Errorf("%v: not classified", err)
			}
			if len(err.Error()) > 600 {
				t.Errorf("error of %d bytes: names must be capped", len(err.Error()))
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			// The host: nothing beside ws and outside, nothing in outside.
			ents, _ := os.ReadDir(base)
			in, _ := os.ReadDir(outside)
			if len(ents) != 2 || len(in) != 0 {
				t.Errorf("outside the workspace: %v, %v", ents, in)
			}
		})
	}
}

func TestUnpackStopsWhenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := wsfs.Unpack(ctx, scratch(t), bytes.NewReader(hostile(t, reg("f"))), -1, roomy)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
}

// TestUnpackStripsSpecialBits: setuid, setgid and sticky bits are
// dropped; the permission bits are kept; an existing file is replaced, an
// existing symlink is replaced (not written through).
func TestUnpackStripsSpecialBitsAndReplaces(t *testing.T) {
	base := scratch(t)
	ws, target := filepath.Join(base, "ws"), filepath.Join(base, "target")
	must(t, os.Mkdir(ws, 0o755))
	must(t, os.WriteFile(target, []byte("host"), 0o644))
	must(t, os.Symlink(target, filepath.Join(ws, "planted")))
	stream := hostile(t,
		&tar.Header{Typeflag: tar.TypeReg, Name: "suid", Size: 4, Mode: 0o4755},
		&tar.Header{Typeflag: tar.TypeReg, Name: "sgid", Size: 4, Mode: 0o2750},
		&tar.Header{Typeflag: tar.TypeDir, Name: "sticky/", Mode: 0o1777},
		&tar.Header{Typeflag: tar.TypeReg, Name: "planted", Size: 4},
	)
	must(t, wsfs.Unpack(context.Background(), ws, bytes.NewReader(stream), -1, roomy))
	for name, want := range map[string]fs.FileMode{"suid": 0o755, "sgid": 0o750, "sticky": fs.ModeDir | 0o777, "planted": 0o644} {
		fi, err := os.Lstat(filepath.Join(ws, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: %v %v, want %v", name, fi.Mode(), err, want)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "host" {
		t.Errorf("written through the planted link: %q", b)
	}
}

// BenchmarkArchiveUnpack streams a 100 MB tree of 1,000 files through
// Archive into Unpack, on a tmpfs (as a session's workspace is) and on
// the disk of the temporary directory.
func BenchmarkArchiveUnpack(b *testing.B) {
	for _, fsys := range []string{"tmpfs", "disk"} {
		b.Run(fsys, func(b *testing.B) {
			base := b.TempDir()
			if fsys == "tmpfs" {
				must2(b, unix.Mount("tmpfs", base, "tmpfs", 0, "size=512m"))
				b.Cleanup(func() { _ = unix.Unmount(base, unix.MNT_DETACH) })
			}
			src := filepath.Join(base, "src")
			data := make([]byte, 100<<10)
			rand.Read(data)
			for i := range 1000 {
				d := filepath.Join(src, "d"+string(rune('a'+i%20)))
				must2(b, os.MkdirAll(d, 0o755))
				must2(b, os.WriteFile(filepath.Join(d, "f"+strings.Repeat("x", i%7)+string(rune('A'+i/20))), data, 0o644))
			}
			b.SetBytes(1000 * int64(len(data)))
			for b.Loop() {
				dst := filepath.Join(base, "dst")
				must2(b, os.Mkdir(dst, 0o755))
				pr, pw := io.Pipe()
				go func() {
					_, err := wsfs.Archive(context.Background(), src, pw, roomy)
					pw.CloseWithError(err)
				}()
				must2(b, wsfs.Unpack(context.Background(), dst, pr, owner, roomy))
				b.StopTimer()
				must2(b, os.RemoveAll(dst))
				b.StartTimer()
			}
		})
	}
}
