package service

import (
	"context"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/service/report"
	"github.com/codecage/codecage/internal/session"
)

// Code contexts (E2B's code interpreter contexts) are kept by their session
// (session/contexts.go): these operations are forwarded to the replica
// that holds it, like every other session request.

// CodeContext is a code context of a session.
type CodeContext = session.CodeContext

// Operations on a session's code contexts.
const (
	opCreateContext  = "create_context"
	opListContexts   = "list_contexts"
	opRemoveContext  = "remove_context"
	opRestartContext = "restart_context"
)

// CreateContext makes a code context in session id: a fresh state of
// lang's interpreter, in cwd ("": the session's home).
func (s *Service) CreateContext(ctx context.Context, id, owner, lang, cwd string) (*CodeContext, error) {
	return do(ctx, s, opCreateContext, call[*CodeContext]{
		session: id, owner: owner, args: contextArgs{Language: lang, Cwd: cwd},
		run: func(ctx context.Context) (*CodeContext, error) {
			se, err := s.session(id, owner)
			if err != nil {
				return nil, err
			}
			cc := se.NewContext(lang, cwd)
			if err := s.startContext(ctx, id, owner, cc); err != nil {
				return nil, err
			}
			cc = se.AddContext(cc)
			return &cc, nil
		},
		success: contextEvent[*CodeContext](id, "create_context"),
	})
}

// ListContexts lists session id's code contexts: E2B's startup defaults
// (of the kernels this server runs), the defaults runs made, and those
// created, in that order.
func (s *Service) ListContexts(ctx context.Context, id, owner string) ([]CodeContext, error) {
	return do(ctx, s, opListContexts, call[[]CodeContext]{
		session: id, owner: owner,
		run: func(context.Context) ([]CodeContext, error) {
			se, err := s.session(id, owner)
			if err != nil {
				return nil, err
			}
			se.ShowStartupContexts(s.KernelEnabled)
			return se.Contexts(), nil
		},
	})
}

// RemoveContext forgets code context cid of session id; its variables go.
func (s *Service) RemoveContext(ctx context.Context, id, owner, cid string) error {
	_, err := do(ctx, s, opRemoveContext, call[struct{}]{
		session: id, owner: owner, args: contextArgs{ID: cid},
		run: func(ctx context.Context) (struct{}, error) {
			se, err := s.session(id, owner)
			if err != nil {
				return struct{}{}, err
			}
			cc, ok := se.RemoveContext(cid)
			if !ok {
				return struct{}{}, contextNotFound(cid)
			}
			// A fresh, empty state under its name.
			_, _, _ = s.execute(ctx, Request{SessionID: id, Owner: owner, Context: cc.State, NewContext: true, Code: session.StartCode(cc.Language), Language: cc.Language}, report.NewRefusals())
			return struct{}{}, nil
		},
		success: contextEvent[struct{}](id, "remove_context"),
	})
	return err
}

// RestartContext starts code context cid of session id afresh: empty, in
// its directory.
func (s *Service) RestartContext(ctx context.Context, id, owner, cid string) error {
	_, err := do(ctx, s, opRestartContext, call[struct{}]{
		session: id, owner: owner, args: contextArgs{ID: cid},
		run: func(ctx context.Context) (struct{}, error) {
			se, err := s.session(id, owner)
			if err != nil {
				return struct{}{}, err
			}
			cc, ok := se.Context(cid)
			if !ok {
				return struct{}{}, contextNotFound(cid)
			}
			return struct{}{}, s.startContext(ctx, id, owner, cc)
		},
		success: contextEvent[struct{}](id, "restart_context"),
	})
	return err
}

// startContext makes (or remakes) cc's state in the interpreter: empty,
// in its directory.
func (s *Service) startContext(ctx context.Context, id, owner string, cc CodeContext) error {
	res, _, err := s.execute(ctx, Request{SessionID: id, Owner: owner, Context: cc.State, NewContext: true, Cwd: cc.Cwd,
		Code: session.StartCode(cc.Language), Language: cc.Language}, report.NewRefusals())
	if err != nil {
		return err
	}
	if !res.Success {
		why := res.Stderr
		if res.Error != nil {
			why += res.Error.Message
		}
		return fmt.Errorf("%w: the context could not start in %s: %s", ErrInvalidRequest, cc.Cwd, why)
	}
	return nil
}

// useContext resolves req's code context in its session
// (session.UseContext).
func (s *Service) useContext(req *Request) error {
	if req.SessionID == "" {
		return nil
	}
	if req.ContextID != "" && (req.Context != "" || req.Language != "") {
		return fmt.Errorf("%w: a run names a code context, or a context and a language, not both", ErrInvalidRequest)
	}
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return err
	}
	var ok bool
	if req.Context, req.Language, ok = se.UseContext(req.ContextID, req.Context, req.Language, s.KernelEnabled); !ok {
		return contextNotFound(req.ContextID)
	}
	return nil
}

// LanguageState names the interpreter state of lang's default context,
// the one a run with that language and no context uses in E2B.
func LanguageState(lang string) string { return session.LanguageState(lang) }

func contextNotFound(id string) error { return fmt.Errorf("context %s %w", Quote(id), ErrNotFound) }

// contextEvent audits an operation on session id's code contexts.
func contextEvent[T any](id, action string) func(T, time.Duration) Event {
	return func(_ T, took time.Duration) Event {
		return Event{Kind: EventSession, Action: action, Outcome: "success", Duration: took, Detail: id}
	}
}

// contextArgs are a context operation's arguments across replicas.
type contextArgs struct {
	ID       string `json:"id,omitempty"`
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
}

func contextOps() map[string]op {
	return map[string]op{
		// Making, clearing and restarting a context runs code in the session.
		opCreateContext:  {admit: admitHeavy, kind: EventSession, action: "create_context", peer: peerOp[contextArgs, *CodeContext]{run: runContext, do: serveCreateContext}},
		opListContexts:   {admit: admitNone, kind: EventSession, action: "list_contexts", quiet: true, peer: peerOp[noArgs, []CodeContext]{do: serveListContexts}},
		opRemoveContext:  {admit: admitHeavy, kind: EventSession, action: "remove_context", peer: peerOp[contextArgs, struct{}]{run: runContext, do: serveRemoveContext}},
		opRestartContext: {admit: admitHeavy, kind: EventSession, action: "restart_context", peer: peerOp[contextArgs, struct{}]{run: runContext, do: serveRestartContext}},
	}
}

func serveCreateContext(ctx context.Context, s *Service, call PeerCall, a contextArgs, _ outputFunc) (*CodeContext, error) {
	return s.CreateContext(ctx, call.SessionID, call.Owner, a.Language, a.Cwd)
}

func serveListContexts(ctx context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) ([]CodeContext, error) {
	return s.ListContexts(ctx, call.SessionID, call.Owner)
}

func serveRemoveContext(ctx context.Context, s *Service, call PeerCall, a contextArgs, _ outputFunc) (struct{}, error) {
	return struct{}{}, s.RemoveContext(ctx, call.SessionID, call.Owner, a.ID)
}

func serveRestartContext(ctx context.Context, s *Service, call PeerCall, a contextArgs, _ outputFunc) (struct{}, error) {
	return struct{}{}, s.RestartContext(ctx, call.SessionID, call.Owner, a.ID)
}

// runContext: making a context starts its language's kernel.
func runContext(s *Service, _ contextArgs) time.Duration { return s.cfg.Timeout + time.Minute }
