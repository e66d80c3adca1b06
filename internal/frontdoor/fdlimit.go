package frontdoor

// SandboxShare is the part of the open-file limit kept for everything
// that is not a client connection (the sandboxes' pipes, pidfds and
// cgroup files, the audit log, the pools), whatever number of clients
// connect: a connection flood must not make runs fail with "too many open
// files".
const SandboxShare = 0.5

// WithinFileLimit lowers s's connection caps so that listeners listeners
// together hold at most the part of the open-file limit fdLimit that
// SandboxShare leaves (fdLimit 0: unknown, s unchanged).
func WithinFileLimit(s Settings, listeners int, fdLimit uint64) Settings {
	if fdLimit == 0 || listeners <= 0 {
		return s
	}
	room := max(int(float64(fdLimit)*(1-SandboxShare))/listeners, 1)
	if s.MaxConns <= 0 || s.MaxConns > room {
		s.MaxConns = room
	}
	if s.MaxConnsPerClient <= 0 || s.MaxConnsPerClient > s.MaxConns {
		s.MaxConnsPerClient = s.MaxConns
	}
	return s
}
