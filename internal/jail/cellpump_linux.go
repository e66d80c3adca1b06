package jail

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// cellPump is Cell.supervise's loop: it copies the cell's two output
// streams and notices the end of its first process, all from one epoll
// instance, in one goroutine.
type cellPump struct {
	c      *Cell
	buf    *[32 << 10]byte
	ep     int // the cell's epoll instance
	pidfd  int // the cell's first process, -1 if unknown
	open   [2]bool
	exited bool
}

// run returns once both streams are over and the first process has ended.
func (p *cellPump) run() {
	c := p.c
	rc, rcErr := c.ep.SyscallConn()
	var events [3]unix.EpollEvent
	for p.open[0] || p.open[1] || !p.exited {
		n := 0
		var err error
		if rcErr == nil {
			err = rc.Read(func(fd uintptr) bool {
				n, _ = unix.EpollWait(int(fd), events[:], 0)
				return n > 0
			})
		}
		if rcErr != nil || (err != nil && !errors.Is(err, os.ErrDeadlineExceeded)) {
			// Not served by the poller (never expected): block here.
			for {
				if n, err = unix.EpollWait(p.ep, events[:], -1); err != unix.EINTR {
					break
				}
			}
			if err != nil {
				// Nor by the epoll instance: wait for the end alone.
				p.stop(0)
				p.stop(1)
				if !p.exited {
					waitPidfd(p.pidfd)
					p.ended()
				}
				continue
			}
		} else if err != nil {
			p.drainNow()
			continue
		}
		for _, ev := range events[:max(n, 0)] {
			switch fd := int(ev.Fd); {
			case fd == p.pidfd:
				p.ended()
			case fd == c.outR[0] && p.open[0]:
				p.read(0)
			case fd == c.outR[1] && p.open[1]:
				p.read(1)
			}
		}
	}
}

// ended records the end of the cell's first process.
func (p *cellPump) ended() {
	p.exited = true
	p.c.ended1()
}

// stop ends a stream: the stream brings no more output.
func (p *cellPump) stop(stream int) {
	if p.open[stream] {
		p.open[stream] = false
		_ = unix.EpollCtl(p.ep, unix.EPOLL_CTL_DEL, p.c.outR[stream], nil)
		if !p.open[1-stream] {
			close(p.c.drained)
		}
	}
}

// read passes on one read's worth of a stream; at its end (or a failure
// other than "nothing now") the stream is over. So it is once cut at its
// cap: the cell is being killed, and a writer that finds the pipe full
// stops there, instead of flooding on while the kernel gets round to
// ending the cell's init (which takes milliseconds on a busy host: a pipe
// moves gigabytes a second).
func (p *cellPump) read(stream int) {
	c := p.c
	n, err := unix.Read(c.outR[stream], p.buf[:])
	if n > 0 {
		c.output.write(stream, c.sinks[stream], p.buf[:n])
		if c.output.cut(stream) {
			p.stop(stream)
		}
		return
	}
	if err != unix.EAGAIN && err != unix.EINTR {
		p.stop(stream)
	}
}

// drainNow runs at Finish's deadline: the program has said its last word,
// so the output is what the pipes hold now; later writes are not read.
// The wait goes on for the end alone.
func (p *cellPump) drainNow() {
	c := p.c
	for stream := range 2 {
		for p.open[stream] && !c.output.cut(stream) {
			m, _ := unix.Read(c.outR[stream], p.buf[:])
			if m <= 0 {
				break
			}
			c.output.write(stream, c.sinks[stream], p.buf[:m])
		}
		p.stop(stream)
	}
	_ = c.ep.SetReadDeadline(time.Time{})
}
