package sandbox

import (
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// outputMarks collect a run's output up to the end marker the harness
// writes to stdout and stderr before it answers: once both have passed,
// the output is complete, whether the sandbox has ended or not.
type outputMarks struct {
	marker         string
	stdout, stderr *markedBuffer
}

func newOutputMarks(onLine func(stream, line string)) *outputMarks {
	marker := "\x00codecage-end-" + jail.NewID() + "\n"
	return &outputMarks{marker: marker,
		stdout: newMarkedBuffer(marker, "stdout", onLine),
		stderr: newMarkedBuffer(marker, "stderr", onLine)}
}

// usageReporter is a sandbox that can say what it has used so far.
type usageReporter interface {
	Usage() (cpu time.Duration, peakMemory int64)
}

// answerEarly runs a request in sb and returns as soon as the harness has
// answered and its output is complete, without waiting for the sandbox to
// end: a gVisor sandbox takes 15-20 ms to shut its kernel down after its
// program exits. ended reports whether the sandbox had ended (then exit is
// its own, and the caller need not wait for it); otherwise exit is built
// from the answer and the sandbox ends on its own.
func answerEarly(sb box, req runtime.Request, tools toolHandler, marks *outputMarks) (rep *runtime.Reply, exit jail.Exit, ended bool) {
	replies := exchange(sb.Channel(), req, tools)
	answered := false // the one value of replies was received
	select {
	case rep = <-replies:
		answered = true
		if rep != nil && marks.stdout.passed(time.Second, sb.Done()) && marks.stderr.passed(time.Second, sb.Done()) {
			marks.stdout.finish()
			marks.stderr.finish()
			exit = jail.Exit{ExitCode: rep.ExitCode}
			if u, ok := sb.(usageReporter); ok {
				exit.CPUTime, exit.PeakMemoryBytes = u.Usage()
			}
			return rep, exit, false
		}
	case <-sb.Done():
	}
	// No answer, or output cut short (a limit): the sandbox's own end says
	// what happened.
	exit = sb.Wait()
	if !answered {
		rep = <-replies // the sandbox is gone: the reader has the reply or EOF
	}
	_ = sb.Channel().Close()
	marks.stdout.finish()
	marks.stderr.finish()
	return rep, exit, true
}
