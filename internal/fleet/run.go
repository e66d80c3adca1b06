package fleet

import (
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// Outcome is what one run of the harness gave.
type Outcome struct {
	// Reply is the harness's reply; nil when the code ended without one
	// (a limit, a crash, os._exit).
	Reply *runtime.Reply
	// Exit is how the run ended; Duration is the run's own time.
	Exit jail.Exit
	// Stdout and Stderr are the run's output, as valid UTF-8.
	Stdout, Stderr string
	// Ended reports that the sandbox has ended (for a session: it is over).
	Ended bool
}

// markerWait bounds the wait for the end marker after the reply: the
// output written before it is already in the pipes.
const markerWait = time.Second

// Run sends req to the sandbox's harness and collects its answer and
// output; complete output lines go to onLine as they come (nil: none).
// Tool calls of the code go to tools (nil: refused).
//
// The one run path for every kind of sandbox; what differs is when the
// run is over:
//   - a zygote's cell: at the reply, the output drained; the cell is then
//     killed without waiting for the kernel to tear it down;
//   - a session (req.KeepAlive) or a gVisor sandbox: at the reply and the
//     end marker on both streams, without waiting for the sandbox to end
//     (a session lives on; gVisor takes 15-20 ms to shut its kernel down);
//   - a native whole jail: at its end, its exit its own.
func (l *Lease) Run(req runtime.Request, tools runtime.ToolHandler, onLine func(stream, line string)) Outcome {
	l.used.Store(true)
	b := l.current()
	// Nothing runs in a frozen sandbox: the run would wait for ever. Whether
	// a paused session may be resumed by a request is the service's to
	// decide before it runs; here the run resumes it, or finds it ended.
	if p, ok := b.(pauser); ok && p.Paused() {
		_ = p.Resume()
	}
	cell, isCell := b.(*cellBox)
	early := !isCell && (req.KeepAlive || l.backend == GVisor)
	out := newOutput(early, onLine)
	req.EndMarker = out.marker
	l.stdout.set(out.stdout)
	l.stderr.set(out.stderr)
	defer l.stdout.set(nil)
	defer l.stderr.set(nil)

	start := time.Now()
	var o Outcome
	switch {
	case isCell:
		o.Reply, o.Exit = cell.run(req, tools)
		o.Ended = true
		out.finish()
	case early:
		o.Reply, o.Exit, o.Ended = answerEarly(b, req, tools, out)
	default:
		answers := exchange(b, req, tools)
		o.Exit = b.Wait()
		// Every process of the sandbox is gone: the reader has the reply or EOF.
		o.Reply = (<-answers).Reply
		o.Ended = true
		out.finish()
	}
	o.Exit.Duration = time.Since(start) // the run's own time, not the sandbox's age
	o.Stdout, o.Stderr = out.stdout.text(), out.stderr.text()
	return o
}

// exchange runs [runtime.Exchange] on b's channel in the background.
func exchange(b Box, req runtime.Request, tools runtime.ToolHandler) <-chan runtime.Answer {
	answers := make(chan runtime.Answer, 1)
	go func() { answers <- runtime.Exchange(b.Channel(), req, tools) }()
	return answers
}

// answerEarly returns as soon as the harness has answered and its output
// is complete, without waiting for the sandbox to end. ended reports that
// the sandbox had ended (exit is then its own); otherwise exit is built
// from the answer, and a one-shot sandbox ends on its own.
func answerEarly(b Box, req runtime.Request, tools runtime.ToolHandler, out *output) (*runtime.Reply, jail.Exit, bool) {
	answers := exchange(b, req, tools)
	var a runtime.Answer
	answered := false
	select {
	case a = <-answers:
		answered = true
		complete := false
		if a.Reply != nil {
			if req.KeepAlive {
				// A session lives on: its marker is on its way or the
				// output limit cut it, which the next request finds out.
				out.stdout.wait(markerWait)
				out.stderr.wait(markerWait)
				complete = true
			} else {
				complete = out.stdout.passed(markerWait, b.Done()) && out.stderr.passed(markerWait, b.Done())
			}
		}
		if complete {
			out.finish()
			exit := jail.Exit{ExitCode: a.Reply.ExitCode}
			if u, ok := b.(usageReporter); ok {
				exit.CPUTime, exit.PeakMemoryBytes = u.Usage()
			}
			return a.Reply, exit, false
		}
	case <-b.Done():
	}
	// No answer, or output cut short (a limit): the sandbox's own end says
	// what happened.
	exit := b.Wait()
	if !answered {
		a = <-answers // the sandbox is gone: the reader has the reply or EOF
	}
	out.finish()
	return a.Reply, exit, true
}
