package wsfs_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/wsfs"
)

// collect gathers w's events until want is among them or d passes.
func collect(t *testing.T, w *wsfs.Watcher, d time.Duration, want func(wsfs.WatchEvent) bool) []wsfs.WatchEvent {
	t.Helper()
	var got []wsfs.WatchEvent
	deadline := time.After(d)
	for {
		evs, err := w.Take()
		got = append(got, evs...)
		for _, e := range evs {
			if want != nil && want(e) {
				return got
			}
		}
		if err != nil {
			return got
		}
		select {
		case <-w.Ready():
		case <-deadline:
			return got
		}
	}
}

func has(name string, op wsfs.Op) func(wsfs.WatchEvent) bool {
	return func(e wsfs.WatchEvent) bool { return e.Name == name && e.Op == op }
}

func TestWatchRecursiveFollowsNewDirsNotLinks(t *testing.T) {
	ws, outside, r := layout(t)
	w, err := r.Watch(".", true, wsfs.WatchLimits{Dirs: 100, Events: 100, Scan: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	must(t, os.MkdirAll(filepath.Join(ws, "n1", "n2"), 0o755))
	// MkdirAll makes n2 after n1: the file's own directory is the one
	// whose create must have been seen (it is watched before it is told).
	collect(t, w, 5*time.Second, has("n1/n2", wsfs.OpCreate))
	// Written after the directory's create was seen: reported by its path.
	must(t, os.WriteFile(filepath.Join(ws, "n1", "n2", "f"), []byte("x"), 0o644))
	got := collect(t, w, 5*time.Second, has("n1/n2/f", wsfs.OpWrite))
	if !hasEvent(got, "n1/n2/f", wsfs.OpWrite) {
		t.Fatalf("no write of n1/n2/f in %v", got)
	}
	// d/up leads to outside: a write there is not the watch's.
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("changed"), 0o644))
	must(t, os.Rename(filepath.Join(ws, "n1"), filepath.Join(ws, "m1")))
	must(t, os.WriteFile(filepath.Join(ws, "m1", "n2", "g"), []byte("x"), 0o644))
	got = collect(t, w, 5*time.Second, has("m1/n2/g", wsfs.OpWrite))
	if !hasEvent(got, "m1/n2/g", wsfs.OpWrite) {
		t.Fatalf("a directory moved within the tree lost its watch: %v", got)
	}
	for _, e := range got {
		if strings.Contains(e.Name, "secret") || strings.HasPrefix(e.Name, "up") || strings.HasPrefix(e.Name, "d/up/") {
			t.Fatalf("an event through a symlink out of the workspace: %+v", e)
		}
	}
}

func TestWatchNotRecursive(t *testing.T) {
	ws, _, r := layout(t)
	w, err := r.Watch(".", false, wsfs.WatchLimits{Dirs: 100, Events: 100, Scan: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	must(t, os.WriteFile(filepath.Join(ws, "d", "deep"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "top"), []byte("x"), 0o644))
	got := collect(t, w, 5*time.Second, has("top", wsfs.OpWrite))
	if !hasEvent(got, "top", wsfs.OpWrite) {
		t.Fatalf("no write of top: %v", got)
	}
	if hasEvent(got, "d/deep", wsfs.OpCreate) {
		t.Fatalf("a watch that is not recursive reported a subdirectory's file: %v", got)
	}
}

func TestWatchBounds(t *testing.T) {
	ws, _, r := layout(t)
	for i := range 20 {
		must(t, os.Mkdir(filepath.Join(ws, fmt.Sprint("w", i)), 0o755))
	}
	if _, err := r.Watch(".", true, wsfs.WatchLimits{Dirs: 10, Events: 10, Scan: 100}); !errors.Is(err, wsfs.ErrWatchTooBig) {
		t.Fatalf("a tree over the directory cap: %v, want ErrWatchTooBig", err)
	}
	if _, err := r.Watch("in.txt", false, wsfs.WatchLimits{}); !errors.Is(err, wsfs.ErrNotDir) {
		t.Fatalf("a watch of a file: %v, want ErrNotDir", err)
	}
	if _, err := r.Watch("nope", false, wsfs.WatchLimits{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a watch of a missing directory: %v, want not-exist", err)
	}
	// The event buffer: past it, one overflow notice, not growth.
	w, err := r.Watch(".", false, wsfs.WatchLimits{Dirs: 10, Events: 5, Scan: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		must(t, os.WriteFile(filepath.Join(ws, fmt.Sprint("f", i)), []byte("x"), 0o644))
	}
	// The reader has filled the buffer once it drops one; Take then
	// holds the first 5 and the notice.
	for deadline := time.Now().Add(20 * time.Second); w.Dropped() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no event was dropped 20 s after 50 files were written into a buffer of 5")
		}
	}
	evs, err := w.Take()
	if err != nil || len(evs) != 6 || evs[5].Op != wsfs.OpOverflow || evs[5].Dropped == 0 {
		t.Fatalf("50 files into a buffer of 5: %d events (%v), err %v; want 5 and an overflow", len(evs), evs, err)
	}
	w.Close()
	// Events that came between the Take and the Close are still handed
	// out (the contract); after them, and only a bounded number of them,
	// comes EOF.
	for i := 0; ; i++ {
		evs, err := w.Take()
		if err == io.EOF {
			break
		}
		if err != nil || len(evs) == 0 || i == 2 {
			t.Fatalf("Take after Close, call %d: %d events, %v; want the rest then EOF", i, len(evs), err)
		}
	}
}

func hasEvent(evs []wsfs.WatchEvent, name string, op wsfs.Op) bool {
	for _, e := range evs {
		if e.Name == name && e.Op == op {
			return true
		}
	}
	return false
}
