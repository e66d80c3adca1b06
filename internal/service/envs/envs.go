// Package envs is the service's environments domain: named read-only
// roots the operator builds once (envstore), which runs, sessions and E2B
// templates start from. It builds, checks, lists, removes and collects
// them, counts the sandboxes using each, seeds a session's home from its
// root and runs its start and ready commands. It also runs chain builds
// (an E2B template's stages, which its adapter plans) with their log and
// the files uploaded for them (chains.go, chainrun.go, uploads.go).
//
// It is plain logic over the store, the fleet and the session table: the
// root admits, audits and forwards, and hands it what it resolved. The
// commands and packages it needs come through CommandRunner and
// PipRunner, which the root wires.
package envs

import (
	"context"
	"log/slog"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/session"
)

// Envs is the environments of one service.
type Envs struct {
	cfg      config.Config
	store    *envstore.Store
	fleet    *fleet.Fleet
	sessions *session.Table
	o        Options
	// use counts the sandboxes using each environment, and the builds in
	// progress (use.go).
	use registry
	// chains are the chain builds (chains.go), uploads the files their
	// stages copy (uploads.go).
	chains  chains
	uploads uploads
}

// Options are what the domain takes from the root besides its stores.
type Options struct {
	Log      *slog.Logger
	Commands CommandRunner
	Pip      PipRunner
	// Caps are the operator's bounds every sandbox shares (its probes').
	Caps fleet.Caps
	// Pooled is the pooled sandbox of a class (the root's layer and
	// bounds): an environment's pools start from it.
	Pooled func(memory int64, dataScience bool) fleet.Work
	// StartError says what a failure to get a sandbox means to the caller.
	StartError func(ctx context.Context, err error) error
}

// New returns the environments of store, whose sandboxes come from fl and
// whose sessions are in table.
func New(cfg config.Config, store *envstore.Store, fl *fleet.Fleet, table *session.Table, o Options) *Envs {
	return &Envs{cfg: cfg, store: store, fleet: fl, sessions: table, o: o,
		chains: chains{slots: make(chan struct{}, max(cfg.EnvMaxBuilds, 1))}, uploads: uploads{base: cfg.StateDir}}
}
