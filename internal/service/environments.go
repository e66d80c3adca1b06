package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service/envs"
)

// Environments: named read-only roots the operator builds once
// (envstore), which runs, sessions and E2B templates start from. The
// domain is internal/service/envs; here are its operations' envelopes,
// every one the operator's (operator.go), and envwire.go wires it.

// EventEnvironment is the audit kind of environment builds, removals and
// collections.
const EventEnvironment = "environment"

// The environment operations (rows of ops); they run where they are asked.
const (
	opEnvBuild  = "environment_build"
	opEnvList   = "environment_list"
	opEnvGet    = "environment_get"
	opEnvRemove = "environment_remove"
	opEnvGC     = "environment_gc"
)

// EnvironmentBuild asks for a new environment (envs.BuildRequest).
type EnvironmentBuild = envs.BuildRequest

// GCResult says what a collection of the environment store freed
// (envs.GCResult).
type GCResult = envs.GCResult

// BuildEnvironment builds b, records it and returns it; a failed build
// leaves nothing behind. Operators only.
func (s *Service) BuildEnvironment(ctx context.Context, b EnvironmentBuild) (envstore.Env, error) {
	return do(ctx, s, opEnvBuild, call[envstore.Env]{
		code: bounded.String(b.Name, 100),
		check: func() error {
			if err := s.requireOperator(ctx); err != nil {
				return err
			}
			return envs.Check(&b)
		},
		run: func(ctx context.Context) (envstore.Env, error) {
			// A shutdown cancels a build like any request's sandbox.
			ctx, unbind := s.bind(ctx)
			defer unbind()
			return s.envs.Build(ctx, b)
		},
		success: func(e envstore.Env, took time.Duration) Event {
			return Event{Kind: EventEnvironment, Action: "build", Code: e.Name, Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s %s from %s (%d bytes, Python %s)", e.Name, e.ID, e.Source.Kind, e.Size, e.PythonVersion)}
		},
	})
}

// Environments lists the environments. Operators only.
func (s *Service) Environments(ctx context.Context) ([]envstore.Env, error) {
	return do(ctx, s, opEnvList, call[[]envstore.Env]{
		check: func() error { return s.requireOperator(ctx) },
		run:   func(context.Context) ([]envstore.Env, error) { return s.envs.List() },
	})
}

// Environment describes one environment (envstore.ErrNotFound: none).
// Operators only.
func (s *Service) Environment(ctx context.Context, name string) (envstore.Env, error) {
	return do(ctx, s, opEnvGet, call[envstore.Env]{
		check: func() error {
			if err := s.requireOperator(ctx); err != nil {
				return err
			}
			return envs.CheckName(name)
		},
		run: func(context.Context) (envstore.Env, error) { return s.envs.Get(name) },
	})
}

// RemoveEnvironment deletes an environment; its layers go at the next
// garbage collection unless another environment uses them. Sandboxes
// running from it keep their root (their mounts hold it, and the
// collector skips what is in use). Operators only.
func (s *Service) RemoveEnvironment(ctx context.Context, name string) error {
	_, err := do(ctx, s, opEnvRemove, call[envstore.Env]{
		code: bounded.String(name, 100),
		check: func() error {
			if err := s.requireOperator(ctx); err != nil {
				return err
			}
			return envs.CheckName(name)
		},
		run: func(context.Context) (envstore.Env, error) {
			e, err := s.envs.Remove(name)
			if err == nil {
				// The programs its commands resolved in its root go too.
				s.cmds.ForgetEnvironment(e.ID)
			}
			return e, err
		},
		success: func(e envstore.Env, took time.Duration) Event {
			return Event{Kind: EventEnvironment, Action: "remove", Code: e.Name, Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s %s (in use by %d sandboxes)", e.Name, e.ID, s.envs.Uses(e.ID))}
		},
	})
	return err
}

// CollectEnvironments removes the roots and layers no environment uses.
// While a removed environment's sandboxes still run, it collects nothing
// and says which ones it waits for. Operators only.
func (s *Service) CollectEnvironments(ctx context.Context) (GCResult, error) {
	return do(ctx, s, opEnvGC, call[GCResult]{
		check: func() error { return s.requireOperator(ctx) },
		run:   func(context.Context) (GCResult, error) { return s.envs.GC() },
		success: func(r GCResult, took time.Duration) Event {
			detail := fmt.Sprintf("%d roots, %d layers, %d bytes freed", r.Roots, r.Layers, r.Bytes)
			if len(r.Deferred) > 0 {
				detail = "deferred: in use: " + strings.Join(r.Deferred, ",")
			}
			return Event{Kind: EventEnvironment, Action: "gc", Outcome: "success", Duration: took, Detail: detail}
		},
	})
}

// EnvironmentExists reports whether an environment of that name exists.
// Every caller may ask (a run or a session may name one, an E2B client
// asks Template.exists); the record itself is the operators'.
func (s *Service) EnvironmentExists(ctx context.Context, name string) bool {
	return s.envs.Exists(name)
}
