// Package fleet owns every running sandbox of the service: it is the one
// place that starts, counts, pools and stops them, for every backend
// (native jails, cells forked by a zygote, gVisor) and every kind of work
// (stateless runs, sessions and their spares, commands, pip, the
// validator). One budget, SANDBOX_MAX_SANDBOXES, bounds them all: a
// sandbox exists only while it holds one of the budget's slots, handed out
// in order, with idle pooled sandboxes giving theirs up to a caller that
// would otherwise wait (see [pool.Budget]).
//
// A [Lease] is a sandbox and its slot. Its [Lease.Run] is the one run
// path: it sends the request to the harness (the exchange of
// [runtime.Exchange]), collects the output, and decides when the run is
// over, whatever the kind of sandbox.
//
// The fleet turns a description of the work ([Work]: a run, a session,
// a command, pip, the analyzer, a pooled sandbox) into the jail's spec and
// limits, in work.go and nowhere else, and re-exports the facts of the
// layers below that the layers above need (facts.go): only the fleet
// imports the jail, gVisor, the harness and the pools.
//
// The fleet knows jails, gVisor, pools and the harness's protocol. It
// knows nothing of requests as users send them, profiles, sessions'
// workspaces, audit, metrics or surfaces: those are the service's
// (internal/sandbox), which tells the fleet what to start.
package fleet
