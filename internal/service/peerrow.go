package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// How an operation crosses replicas. Its row in ops carries a peerOp:
// the type of its arguments (PeerCall.Args), how long the owner may take
// to run it, and how the owner serves it. The public method hands do its
// arguments as that type, so a new forwarded operation is one row and one
// method, and no other operation's fields are in its call.

// outputFunc receives a run's output lines as they come.
type outputFunc = func(stream, line string)

// peerRow is a peerOp of any argument type, as ops holds it.
type peerRow interface {
	// encode checks that args (nil: none) are the operation's argument
	// type and encodes them; run is how long the owner may take to run
	// them once admitted.
	encode(s *Service, args any) (raw json.RawMessage, run time.Duration, err error)
	// serve decodes a forwarded call's arguments and runs it here.
	serve(ctx context.Context, s *Service, call PeerCall, out outputFunc) (any, error)
	// decode is the call's arguments as their type (for tests).
	decode(call PeerCall) (any, error)
}

// peerOp is an operation as a replica forwards it: Req are its
// arguments, Res its answer.
type peerOp[Req, Res any] struct {
	// run is how long the owner may take to run req once admitted (nil:
	// no run to wait for); see forwardDeadline.
	run func(s *Service, req Req) time.Duration
	// do runs a forwarded call here, as its public method would.
	do func(ctx context.Context, s *Service, call PeerCall, req Req, out outputFunc) (Res, error)
}

func (p peerOp[Req, Res]) encode(s *Service, args any) (json.RawMessage, time.Duration, error) {
	var req Req
	if args != nil {
		r, ok := args.(Req)
		if !ok {
			// A method that hands do another operation's arguments: a
			// defect, reported as an internal error, never sent.
			return nil, 0, fmt.Errorf("a peer call's arguments are %T, not %T", args, req)
		}
		req = r
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: cannot forward the request: %v", ErrInvalidRequest, err)
	}
	var run time.Duration
	if p.run != nil {
		run = p.run(s, req)
	}
	return raw, run, nil
}

func (p peerOp[Req, Res]) args(call PeerCall) (Req, error) {
	var req Req
	if len(call.Args) == 0 {
		// No arguments at all: not a call of this operation (a v1 call
		// without its request, or a stray one).
		return req, errUnknownOp(call.Op)
	}
	if err := json.Unmarshal(call.Args, &req); err != nil {
		return req, fmt.Errorf("%w: the arguments of peer operation %q: %v", ErrInvalidRequest, call.Op, err)
	}
	return req, nil
}

func (p peerOp[Req, Res]) serve(ctx context.Context, s *Service, call PeerCall, out outputFunc) (any, error) {
	req, err := p.args(call)
	if err != nil {
		return nil, err
	}
	return p.do(ctx, s, call, req, out)
}

func (p peerOp[Req, Res]) decode(call PeerCall) (any, error) { return p.args(call) }

// noArgs are the arguments of an operation that needs only its session.
type noArgs struct{}
