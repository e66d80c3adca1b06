package commands

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service/errdefs"
)

// TestProcessFollowersSeeItsOutputAndEnd: a process's followers get its
// start, its output (what the stream held back too) and its end, from its
// start or from now; it is found by pid or tag, only by its owner, listed
// while it runs; and one gone with its session ends its followers with
// ErrSessionGone.
func TestProcessFollowersSeeItsOutputAndEnd(t *testing.T) {
	ps := NewProcesses()
	tag := "t"
	_, cancel := context.WithCancel(context.Background())
	p := ps.Add("s1", "alice", &tag, ProcessSpec{Cmd: "echo"}, cancel)
	if p.Info().PID != firstPID+1 {
		t.Fatalf("first pid %d", p.Info().PID)
	}
	release := make(chan struct{})
	run := func(req CommandRequest) (*CommandResult, error) {
		req.OnStart()
		req.OnOutput("stdout", "one\n")
		<-release
		return &CommandResult{Stdout: "one\ntwo", ExitCode: 0, Success: true}, nil
	}
	done := make(chan struct{})
	go func() {
		ps.Run("s1", p, CommandRequest{}, run, func() bool { return false })
		close(done)
	}()
	if err := p.WaitStarted(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Find("s1", "bob", Selector{Tag: &tag}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("another owner found it: %v", err)
	}
	if got, err := ps.Find("s1", "alice", Selector{Tag: &tag}); err != nil || got != p {
		t.Fatalf("by tag: %v", err)
	}
	if list := ps.List("s1", "alice"); len(list) != 1 || *list[0].Tag != "t" {
		t.Fatalf("listed %+v", list)
	}
	close(release)
	var out strings.Builder
	end, err := p.Follow(context.Background(), true, time.Minute, func(ev ProcessEvent) error {
		out.WriteString(ev.Stream + ":" + string(ev.Data) + "|")
		return nil
	})
	if err != nil || end.ExitCode != 0 || out.String() != "start:|stdout:one\n|stdout:two|" {
		t.Fatalf("followed %q, end %+v, %v", out.String(), end, err)
	}
	<-done
	if list := ps.List("s1", "alice"); len(list) != 0 {
		t.Fatalf("an ended process is listed: %+v", list)
	}
	if err := p.Signal(); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("signal after its end: %v", err)
	}

	// Gone with its session.
	_, cancel = context.WithCancel(context.Background())
	q := ps.Add("s1", "alice", nil, ProcessSpec{}, cancel)
	canceled := LimitCanceled
	ps.Run("s1", q, CommandRequest{}, func(req CommandRequest) (*CommandResult, error) {
		req.OnStart()
		return &CommandResult{Limit: &canceled}, nil
	}, func() bool { return true })
	if _, err := q.Follow(context.Background(), false, time.Minute, func(ProcessEvent) error { return nil }); !errors.Is(err, errdefs.ErrSessionGone) {
		t.Fatalf("a process gone with its session: %v", err)
	}
}

// TestProcessHistoryIsBounded: a live follower gets a process's whole
// output, however long; what is kept for a follower from the start is
// its last historyBytes or so, ending with its last line.
func TestProcessHistoryIsBounded(t *testing.T) {
	ps := NewProcesses()
	_, cancel := context.WithCancel(context.Background())
	p := ps.Add("s1", "alice", nil, ProcessSpec{Cmd: "server"}, cancel)
	line := strings.Repeat("x", 1023) + "\n"
	const lines = 3 * historyBytes / 1024
	following := make(chan struct{})
	live := make(chan int, 1)
	go func() {
		n := 0
		_, err := p.Follow(context.Background(), true, time.Minute, func(ev ProcessEvent) error {
			if ev.Stream == "start" {
				close(following)
			}
			n += len(ev.Data)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		live <- n
	}()
	ps.Run("s1", p, CommandRequest{}, func(req CommandRequest) (*CommandResult, error) {
		req.OnStart()
		<-following
		for i := 0; i < lines; i++ {
			req.OnOutput("stdout", line)
		}
		req.OnOutput("stdout", "last\n")
		return &CommandResult{Success: true}, nil
	}, func() bool { return false })
	if n := <-live; n != lines*len(line)+len("last\n") {
		t.Fatalf("the live follower got %d bytes of %d", n, lines*len(line)+len("last\n"))
	}
	var late []string
	n := 0
	if _, err := p.Follow(context.Background(), true, time.Minute, func(ev ProcessEvent) error {
		n += len(ev.Data)
		late = append(late, string(ev.Data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n > historyBytes || n < historyBytes-len(line) || late[len(late)-1] != "last\n" {
		t.Fatalf("a late follower from the start got %d bytes (history %d), ending %q", n, historyBytes, late[len(late)-1])
	}
}
