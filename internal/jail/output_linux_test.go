package jail

import (
	"bytes"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A read deadline in the past ends a copy with what the pipe holds, even
// though its write end is still open (Cell.Finish).
func TestOutputDeadlineDrainsWhatThePipeHolds(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var over int
	out := NewOutput(100, func() { over++ })
	var got bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	if _, err := w.Write([]byte("first ")); err != nil {
		t.Fatal(err)
	}
	go out.Copy(&wg, 0, r, &got)
	// The copier has read what the pipe held (and waits in its next read):
	// the pipe holds nothing (SIOCINQ is FIONREAD).
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		var held int
		if cerr := rc.Control(func(fd uintptr) { held, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil || err != nil {
			t.Fatalf("FIONREAD: %v %v", cerr, err)
		}
		if held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copier did not read the pipe's %d bytes in 10 s", held)
		}
	}
	if _, err := w.Write(bytes.Repeat([]byte("x"), 150)); err != nil {
		t.Fatal(err)
	}
	// Written after the copier's read returned, before the deadline:
	// only the drain can see it.
	if err := r.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the copy waits for the pipe's end")
	}
	if got.Len() != 100 || !bytes.HasPrefix(got.Bytes(), []byte("first x")) || !out.Truncated() || over == 0 {
		t.Fatalf("got %d bytes %q, truncated %v, over %d", got.Len(), got.String(), out.Truncated(), over)
	}
}
