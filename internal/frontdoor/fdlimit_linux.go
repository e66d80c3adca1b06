package frontdoor

import "golang.org/x/sys/unix"

// RaiseFileLimit raises the soft open-file limit to the hard one (Go's
// runtime does so at start too; a server embedding this package may not)
// and returns the soft limit then in force, 0 when it cannot be read.
func RaiseFileLimit() uint64 {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	if l.Cur < l.Max {
		raised := unix.Rlimit{Cur: l.Max, Max: l.Max}
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &raised) == nil {
			l.Cur = l.Max
		}
	}
	if l.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return l.Cur
}
