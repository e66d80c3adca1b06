package service

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service/envs"
)

// Chain builds: one environment built through intermediate ones in the
// background (an E2B template, whose steps its adapter plans into
// stages), read back by id. The domain (envs/chains.go) keeps them and
// their uploads; here are the envelopes, and the goroutine each build
// runs on, which Shutdown waits for.

// The chain build operations (rows of localOps).
const (
	opEnvChainRequest = "environment_chain_request"
	opEnvChainStart   = "environment_chain_start"
	opEnvChainUpload  = "environment_chain_upload"
)

// chainTimeout bounds a whole chain (each stage has
// SANDBOX_ENV_BUILD_TIMEOUT too).
const chainTimeout = 2 * time.Hour

// The domain's types, as the surfaces name them.
type (
	// BuildStage is one environment build of a chain.
	BuildStage = envs.Stage
	// BuildFailure is why a chain failed, and at which step of its plan.
	BuildFailure = envs.Failure
	// BuildStatus is a chain's status with a page of its log.
	BuildStatus = envs.ChainPage
	// BuildLogEntry is one line of a chain's log.
	BuildLogEntry = envs.LogEntry
)

// A chain's states, and its refusals.
const (
	BuildWaiting  = envs.ChainWaiting
	BuildBuilding = envs.ChainBuilding
	BuildReady    = envs.ChainReady
	BuildFailed   = envs.ChainFailed
	// MaxBuildsKept is how many chain builds the service remembers.
	MaxBuildsKept = envs.MaxChainsKept
)

var (
	ErrTooManyBuilds = envs.ErrTooManyChains
	ErrBuildRunning  = envs.ErrChainRunning
	ErrBuildStarted  = envs.ErrChainStarted
)

// IsBuildStage reports whether name is an intermediate stage of a chain
// (never a name of its own).
func IsBuildStage(name string) bool { return envs.IsStage(name) }

// RequestEnvironmentBuild records a chain build of environment name for
// owner, to be started by StartEnvironmentBuild, and returns its id.
// Operators only.
func (s *Service) RequestEnvironmentBuild(ctx context.Context, name, owner string) (string, error) {
	return do(ctx, s, opEnvChainRequest, call[string]{
		code:  name,
		check: func() error { return s.requireOperator(ctx) },
		run:   func(context.Context) (string, error) { return s.envs.RequestChain(name, owner) },
	})
}

// StartEnvironmentBuild starts owner's chain build id of name: plan,
// given the prefix its intermediate environments are named by, makes its
// stages (a failure ends the build with it), which then run in the
// background. Operators only.
func (s *Service) StartEnvironmentBuild(ctx context.Context, name, id, owner string, plan func(prefix string) ([]BuildStage, *BuildFailure)) error {
	_, err := do(ctx, s, opEnvChainStart, call[int]{
		code:  name,
		check: func() error { return s.requireOperator(ctx) },
		run: func(context.Context) (int, error) {
			c, err := s.envs.StartChain(name, id, owner)
			if err != nil {
				return 0, err
			}
			stages, f := plan(c.Prefix())
			if f != nil {
				s.envs.FailChain(c, f)
				return 0, nil
			}
			// The build outlives this request: its own context, with the
			// caller its stages are audited for.
			bg := context.Background()
			if caller, ok := CallerFrom(ctx); ok { // none: in-process, the operator
				bg = WithCaller(bg, caller)
			}
			// It is in progress for Shutdown (spawn), which waits for it
			// and then cancels it (bind); its stages are calls of its own,
			// admitted within it one at a time, as a run's commands are.
			bg, unbind := s.bind(withAdmission(bg))
			bg, cancel := context.WithTimeout(bg, chainTimeout)
			err = s.spawn(func() {
				defer unbind()
				defer cancel()
				s.envs.RunChain(bg, c, stages, chainOps{s})
			})
			if err != nil {
				cancel()
				unbind()
				s.envs.FailChain(c, &BuildFailure{Step: "base", Message: err.Error()})
				return 0, err
			}
			return len(stages), nil
		},
		success: func(n int, took time.Duration) Event {
			return Event{Kind: EventEnvironment, Action: "chain", Code: name, Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("build %s of %s: %d stages started", id, name, n)}
		},
	})
	return err
}

// EnvironmentBuildStatus is owner's chain build id of name, with its log
// from offset on (at most limit entries); ErrNotFound when not kept.
func (s *Service) EnvironmentBuildStatus(ctx context.Context, name, id, owner string, offset, limit int) (BuildStatus, error) {
	return s.envs.ChainPage(name, id, owner, offset, limit)
}

// LatestEnvironmentBuild is the id of the newest chain build of name kept
// ("": none).
func (s *Service) LatestEnvironmentBuild(ctx context.Context, name string) string {
	return s.envs.LatestChain(name)
}

// HasBuildUpload reports whether name's files of hash were uploaded for
// its next chain build.
func (s *Service) HasBuildUpload(ctx context.Context, name, hash string) bool {
	return s.envs.HasUpload(name, hash)
}

// PutBuildUpload stores name's files of hash (a tar, gzipped or not) for
// its next chain build, until that build ends. The surface vouches for
// the caller (E2B signs the upload's URL for an operator).
func (s *Service) PutBuildUpload(ctx context.Context, name, hash string, body io.Reader) error {
	_, err := do(ctx, s, opEnvChainUpload, call[int]{
		code: name,
		run:  func(context.Context) (int, error) { return 0, s.envs.PutUpload(name, hash, body) },
	})
	return err
}

// RemoveBuiltEnvironment removes environment name, the intermediate
// stages its chain builds left, and its uploads. Operators only (each
// removal is the operator's RemoveEnvironment).
func (s *Service) RemoveBuiltEnvironment(ctx context.Context, name string) error {
	if err := s.requireOperator(ctx); err != nil {
		return err
	}
	return s.envs.RemoveChained(ctx, chainOps{s}, name)
}

// chainOps gives a chain's stages the root's own build and removal, so
// each is admitted and audited as the operator's.
type chainOps struct{ s *Service }

func (o chainOps) Build(ctx context.Context, b envs.BuildRequest) (envstore.Env, error) {
	return o.s.BuildEnvironment(ctx, b)
}

func (o chainOps) Remove(ctx context.Context, name string) error {
	return o.s.RemoveEnvironment(ctx, name)
}
