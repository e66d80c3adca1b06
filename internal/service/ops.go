package service

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Every operation the service offers is a row of ops, and its public
// method hands do the part that is its own (run it, describe its success).
// do is the one envelope around them: forward to the replica holding the
// session, admit, bind to shutdown, run, audit. Each domain's wrapper
// file declares its rows beside its methods (sessionOps, fileOps, ...);
// ServePeer and forward read the same rows, so an operation is served for
// the other replicas and bounded when forwarded by its row's peer, or
// visibly not (no peer).

// admission is what an operation takes from the service's limits.
type admission int

const (
	// admitNone: it only reads or retimes the session table.
	admitNone admission = iota
	// admitLight: a rate token, and it counts as in progress for a drain.
	admitLight
	// admitHeavy: a concurrency slot (it starts or runs a sandbox); it
	// is also canceled when Shutdown stops waiting.
	admitHeavy
)

// op is one operation of the service.
type op struct {
	admit admission
	// kind and action name its audit events; a quiet operation (a read)
	// audits only a failure to forward it.
	kind, action string
	quiet        bool
	// parked is what it does with its session when that is parked in
	// the snapshot store (park.go): bring it back first (the default).
	parked parkRule
	// peer is how a call of a session another replica holds travels
	// there and is served (peerrow.go); nil: it is refused there.
	peer peerRow
}

// opValidate runs only where it is asked.
const opValidate = "validate"

// ops is filled by init: its peers call the public methods, which read
// ops.
var ops map[string]op

func init() {
	ops = joinOps(runOps(), commandOps(), installOps(), sessionOps(), persistOps(), fileOps(), localOps(), contextOps(), processOps(), logOps(), secretOps())
}

// joinOps makes one table of the domains' rows.
func joinOps(parts ...map[string]op) map[string]op {
	all := make(map[string]op)
	for _, part := range parts {
		for name, o := range part {
			if _, dup := all[name]; dup {
				panic("sandbox: operation " + name + " has two rows")
			}
			all[name] = o
		}
	}
	return all
}

// localOps are rows of operations that are never forwarded and have no
// wrapper file of rows: a validation, and the operator's environments.
func localOps() map[string]op {
	return map[string]op{
		opValidate: {admit: admitHeavy, kind: EventValidate},
		// The operator's environments (environments.go), kept by this
		// replica's store. A build runs sandboxes but holds no run slot
		// for its many minutes: builds have their own bound.
		opEnvBuild:  {admit: admitLight, kind: EventEnvironment, action: "build"},
		opEnvList:   {admit: admitNone, kind: EventEnvironment, action: "list", quiet: true},
		opEnvGet:    {admit: admitNone, kind: EventEnvironment, action: "get", quiet: true},
		opEnvRemove: {admit: admitLight, kind: EventEnvironment, action: "remove"},
		opEnvGC:     {admit: admitLight, kind: EventEnvironment, action: "gc"},
		// A chain build (envchains.go): its stages are builds of their
		// own, each admitted and audited as opEnvBuild.
		opEnvChainRequest: {admit: admitLight, kind: EventEnvironment, action: "chain_request"},
		opEnvChainStart:   {admit: admitLight, kind: EventEnvironment, action: "chain"},
		opEnvChainUpload:  {admit: admitLight, kind: EventEnvironment, action: "chain_upload"},
	}
}

// call is one request to an operation, as its public method has it.
type call[T any] struct {
	// session is the session it is about, and owner its caller's owner;
	// a session of another replica is served there, given args (nil:
	// none), the operation's arguments as its row's peer types them.
	session, owner string
	args           any
	onOutput       func(stream, line string)
	// onForward runs just before the call is forwarded.
	onForward func()
	// forwardAction is the audit action of a failure to forward, when
	// not the operation's.
	forwardAction string
	// check refuses a malformed request before it is admitted.
	check func() error
	// profile and code go into the failure event.
	profile, code string
	run           func(ctx context.Context) (T, error)
	// success describes the success event (nil, or an event without a
	// kind: none is audited).
	success func(res T, took time.Duration) Event
}

// do runs an operation here, or on the replica that holds its session:
// the envelope every public method shares.
func do[T any](ctx context.Context, s *Service, name string, c call[T]) (T, error) {
	o, ok := ops[name]
	if !ok {
		panic("sandbox: operation " + name + " is not in ops")
	}
	if r := s.remote(c.session); r != "" && !s.sessions.Has(c.session) {
		peer := PeerCall{Op: name, Owner: c.owner, SessionID: c.session}
		action := o.action
		if c.forwardAction != "" {
			action = c.forwardAction
		}
		if c.onForward != nil {
			c.onForward()
		}
		res, err := forward[T](ctx, s, r, peer, c.args, c.onOutput, o.kind, action)
		if !errors.Is(err, ErrSessionLost) {
			return res, err
		}
		// Its replica is gone: another one may have taken it over from
		// the shared store, or this one may (adopt.go).
		who, found := s.adopter(ctx, c.session, c.owner)
		switch {
		case who == "" || !found:
			return res, err
		case who != s.cluster.Self():
			peer.Adopt = true
			return forward[T](ctx, s, who, peer, c.args, c.onOutput, o.kind, action)
		}
		// This replica took it over: BringBack, below, opens it here.
	}
	start := time.Now()
	fail := func(err error) (T, error) {
		var zero T
		if !o.quiet {
			ev := failureEvent(o.kind, o.action, c.profile, c.code, err, start)
			s.emit(ctx, ev)
			s.logOutcome(o, c.session, c.owner, ev)
		}
		return zero, err
	}
	if c.check != nil {
		if err := c.check(); err != nil {
			return fail(err)
		}
	}
	if o.admit != admitNone {
		release, err := s.admit(ctx, o.admit == admitHeavy)
		if err != nil {
			return fail(err)
		}
		defer release()
		ctx = withAdmission(ctx)
	}
	if o.admit == admitHeavy {
		var cancel context.CancelFunc
		ctx, cancel = s.bind(ctx)
		defer cancel()
	}
	if c.session != "" {
		// Parked in the store and not here: brought back as o says.
		if err := s.persist.BringBack(ctx, c.owner, c.session, o.parked); err != nil {
			return fail(err)
		}
	}
	s.logStarted(o, c.session, c.owner, c.code)
	res, err := c.run(ctx)
	if err != nil {
		return fail(err)
	}
	if c.success != nil {
		if ev := c.success(res, time.Since(start)); ev.Kind != "" { // no kind: nothing happened worth an event
			s.emit(ctx, ev)
			s.logOutcome(o, c.session, c.owner, ev)
		}
	}
	return res, nil
}

// errUnknownOp refuses a peer call no row of ops serves.
func errUnknownOp(name string) error {
	return fmt.Errorf("%w: unknown peer operation %q", ErrInvalidRequest, name)
}
