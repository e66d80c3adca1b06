package service

import (
	"context"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/access"
)

// admitted rides on the context of an admitted request. What the request
// then does for itself (a cell's "!cmd" and "%pip", which the harness asks
// of the service while the run waits) is part of it, not a request of
// its own: it takes no second slot of the key's, which with a limit of
// one could never be had. It is still bounded by the request's slot: the
// slot is lent to one such call at a time, so a run cannot turn its calls
// into parallel work past the key's limit.
type admitted struct {
	lent chan struct{} // holds a token while a call of the request's runs
}

type admittedKey struct{}

// withAdmission returns ctx marked as carrying an admitted request, unless
// it already does (a call of the request's lends the request's slot on).
func withAdmission(ctx context.Context) context.Context {
	if _, ok := ctx.Value(admittedKey{}).(*admitted); ok {
		return ctx
	}
	return context.WithValue(ctx, admittedKey{}, &admitted{lent: make(chan struct{}, 1)})
}

// admitWithin admits a call an admitted request makes for itself (ok is
// false when ctx carries none): it takes the request's lent slot, or is
// refused when another call of the same request holds it.
func admitWithin(ctx context.Context) (release func(), ok bool, err error) {
	a, ok := ctx.Value(admittedKey{}).(*admitted)
	if !ok {
		return nil, false, nil
	}
	select {
	case a.lent <- struct{}{}:
		return sync.OnceFunc(func() { <-a.lent }), true, nil
	default:
		return nil, true, &access.DeniedError{Err: access.ErrKeyConcurrency, RetryAfter: time.Second,
			Msg: "this run already has a command of its own running (a \"!cmd\" or \"%pip\" line): a run's commands run one at a time"}
	}
}
