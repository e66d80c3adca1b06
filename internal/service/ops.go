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
// session, admit, bind to shutdown, run, audit. ServePeer and
// forwardDeadline read the same rows, so an operation added here is
// served for the other replicas and bounded when forwarded, or visibly
// not (no serve).

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
	// run is how long the owner may take to run a forwarded call once
	// admitted (nil: no run to wait for); see forwardDeadline.
	run func(s *Service, call PeerCall) time.Duration
	// parked is what it does with its session when that is parked in
	// the snapshot store (park.go): bring it back first (the default).
	parked parkRule
	// serve runs a call another replica forwarded (nil: never forwarded).
	serve func(ctx context.Context, s *Service, call PeerCall, onOutput func(stream, line string)) (any, error)
}

// Operations that run only where they are asked.
const (
	opCreate   = "create"
	opValidate = "validate"
	// The snapshot store is shared by the replicas: any of them answers.
	opSnapshots      = "snapshots"
	opDeleteSnapshot = "delete_snapshot"
	// A connection to a session's port is made where the session runs.
	opPort = "port"
)

// ops is filled by init: its serve functions call the public methods,
// which read ops.
var ops map[string]op

func init() {
	ops = map[string]op{
		OpExecute:    {admit: admitHeavy, kind: EventExecute, run: runExecute, serve: serveExecute},
		OpCommand:    {admit: admitHeavy, kind: EventCommand, run: runCommandCall, serve: serveCommand},
		OpInstall:    {admit: admitHeavy, kind: EventInstall, run: runInstall, serve: serveInstall},
		opCreate:     {admit: admitHeavy, kind: EventSession, action: "create"},
		opValidate:   {admit: admitHeavy, kind: EventValidate},
		OpRestart:    {admit: admitHeavy, kind: EventSession, action: "restart", run: runRestart, serve: serveRestart},
		OpClose:      {admit: admitLight, kind: EventSession, action: "close", parked: parkLeave, serve: serveClose},
		OpGet:        {admit: admitNone, kind: EventSession, action: "get", quiet: true, parked: parkLeave, serve: serveGet},
		OpList:       {admit: admitNone, kind: EventSession, action: "list", quiet: true, serve: serveList},
		OpLifetime:   {admit: admitNone, kind: EventSession, action: "lifetime", serve: serveLifetime},
		OpWriteFile:  {admit: admitLight, kind: EventFile, action: "write", serve: serveWriteFile},
		OpReadFile:   {admit: admitLight, kind: EventFile, action: "read", quiet: true, serve: serveReadFile},
		OpReadRange:  {admit: admitLight, kind: EventFile, action: "read", quiet: true, serve: serveReadRange},
		OpListFiles:  {admit: admitLight, kind: EventFile, action: "list", quiet: true, serve: serveListFiles},
		OpDeleteFile: {admit: admitLight, kind: EventFile, action: "delete", serve: serveDeleteFile},
		OpStatFile:   {admit: admitLight, kind: EventFile, action: "stat", quiet: true, serve: serveStatFile},
		OpMakeDir:    {admit: admitLight, kind: EventFile, action: "mkdir", serve: serveMakeDir},
		OpMoveFile:   {admit: admitLight, kind: EventFile, action: "move", serve: serveMoveFile},
		// A watch runs here only: not forwarded (no serve), see watch.go.
		OpWatch: {admit: admitLight, kind: EventFile, action: "watch"},
		// A resume may start a sandbox (after a pause that kept no memory).
		OpPause:  {admit: admitLight, kind: EventSession, action: "pause", parked: parkLeave, run: runPause, serve: servePause},
		OpResume: {admit: admitHeavy, kind: EventSession, action: "resume", parked: parkLeave, run: runRestart, serve: serveResume},
		// A snapshot and a fork copy a workspace and an image: a start's time, and more.
		OpSnapshot:       {admit: admitHeavy, kind: EventSession, action: "snapshot", run: runSnapshot, serve: serveSnapshot},
		OpFork:           {admit: admitHeavy, kind: EventSession, action: "fork", run: runSnapshot, serve: serveFork},
		opSnapshots:      {admit: admitNone, kind: EventSession, action: "list_snapshots", quiet: true},
		opDeleteSnapshot: {admit: admitLight, kind: EventSession, action: "delete_snapshot"},
		// A paused session's ports wait for a resume (the caller's).
		opPort:    {admit: admitLight, kind: EventSession, action: "port", parked: parkLeave},
		OpMetrics: {admit: admitNone, kind: EventSession, action: "metrics", quiet: true, parked: parkLeave, serve: serveMetrics},
		// The operator's environments (environments.go), kept by this
		// replica's store. A build runs sandboxes but holds no run slot
		// for its many minutes: builds have their own bound.
		opEnvBuild:  {admit: admitLight, kind: EventEnvironment, action: "build"},
		opEnvList:   {admit: admitNone, kind: EventEnvironment, action: "list", quiet: true},
		opEnvGet:    {admit: admitNone, kind: EventEnvironment, action: "get", quiet: true},
		opEnvRemove: {admit: admitLight, kind: EventEnvironment, action: "remove"},
		opEnvGC:     {admit: admitLight, kind: EventEnvironment, action: "gc"},
	}
}

// call is one request to an operation, as its public method has it.
type call[T any] struct {
	// session is the session it is about; a session of another replica
	// is served there, from peer (whose Op do sets).
	session  string
	peer     PeerCall
	onOutput func(stream, line string)
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
		c.peer.Op = name
		action := o.action
		if c.forwardAction != "" {
			action = c.forwardAction
		}
		if c.onForward != nil {
			c.onForward()
		}
		res, err := forward[T](ctx, s, r, c.peer, c.onOutput, o.kind, action)
		if !errors.Is(err, ErrSessionLost) {
			return res, err
		}
		// Its replica is gone: another one may have taken it over from
		// the shared store, or this one may (adopt.go).
		who, found := s.adopter(ctx, c.session, c.peer.Owner)
		switch {
		case who == "" || !found:
			return res, err
		case who != s.cluster.Self():
			c.peer.Adopt = true
			return forward[T](ctx, s, who, c.peer, c.onOutput, o.kind, action)
		}
		// This replica took it over: bringBack, below, opens it here.
	}
	start := time.Now()
	fail := func(err error) (T, error) {
		var zero T
		if !o.quiet {
			s.emitFailure(ctx, o.kind, o.action, c.profile, c.code, err, start)
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
	}
	if o.admit == admitHeavy {
		var cancel context.CancelFunc
		ctx, cancel = s.bind(ctx)
		defer cancel()
	}
	if c.session != "" {
		if err := s.bringBack(ctx, c.peer.Owner, c.session, o.parked); err != nil {
			return fail(err)
		}
	}
	res, err := c.run(ctx)
	if err != nil {
		return fail(err)
	}
	if c.success != nil {
		if ev := c.success(res, time.Since(start)); ev.Kind != "" { // no kind: nothing happened worth an event
			s.emit(ctx, ev)
		}
	}
	return res, nil
}

// errUnknownOp refuses a peer call no row of ops serves.
func errUnknownOp(name string) error {
	return fmt.Errorf("%w: unknown peer operation %q", ErrInvalidRequest, name)
}
