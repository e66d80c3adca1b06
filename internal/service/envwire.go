package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/envs"
	"github.com/codecage/codecage/internal/service/packages"
	"github.com/codecage/codecage/internal/service/sizing"
	"github.com/codecage/codecage/internal/session"
)

// The root's side of the environments domain (internal/service/envs): it
// gives the domain the commands and pip it runs (through runCommand,
// runDaemon and the packages domain, so an environment's start command or
// requirements get the jail, allow-list and limits an agent's would), and
// hands it the sessions it resolved.

// newEnvs is the environments of store, wired to this service.
func (s *Service) newEnvs(store *envstore.Store) *envs.Envs {
	return envs.New(s.cfg, store, s.fleet, s.sessions, envs.Options{Log: s.log(), Commands: envCommands{s}, Pip: envPip{s},
		Caps: sizing.Caps(s.cfg), Pooled: func(memory int64, dataScience bool) fleet.Work {
			return sizing.Pooled(s.cfg, s.layerBinds, memory, dataScience)
		}, StartError: s.fleetError})
}

// envCommands runs an environment's start and ready commands.
type envCommands struct{ s *Service }

func (c envCommands) RunCommand(ctx context.Context, cmd envs.Command) (envs.CommandOutcome, error) {
	req := CommandRequest{Command: cmd.Command, SessionID: cmd.SessionID, Owner: cmd.Owner, Timeout: cmd.Timeout, OnStart: cmd.OnStart}
	var res *CommandResult
	var err error
	if cmd.Daemon != nil {
		res, err = c.s.runDaemon(ctx, req, cmd.Daemon)
	} else {
		res, err = c.s.runCommand(ctx, req)
	}
	if err != nil {
		return envs.CommandOutcome{}, err
	}
	return envs.CommandOutcome{Success: res.Success, ExitCode: res.ExitCode, Error: res.Error, Limit: res.Limit,
		Output: res.Stdout + res.Stderr}, nil
}

// envPip installs an environment's requirements.
type envPip struct{ s *Service }

func (p envPip) Precheck(ctx context.Context, r policy.Requirement) (string, string) {
	return p.s.pkgs.Precheck(ctx, r)
}

func (p envPip) Install(ctx context.Context, t envs.PipTarget, reqs []string) (string, fleet.Exit, error) {
	out, exit, _, err := p.s.pkgs.RunPip(ctx, packages.Target{ID: t.ID, Site: t.Site, UID: t.UID, Interpreter: t.Interpreter,
		Root: t.Root, Timeout: t.Timeout, MaxInstall: t.MaxInstall, Log: t.Log}, reqs)
	return out, exit, err
}

func (envPip) Installed(dir string) []envs.Distribution {
	var out []envs.Distribution
	for _, p := range packages.Installed(dir) {
		out = append(out, envs.Distribution{Name: p.Name, Modules: p.Modules})
	}
	return out
}

// seedSession copies environment env's files at session id's home into
// its workspace (envs.Seed), and reports what it copied and left out.
func (s *Service) seedSession(ctx context.Context, id, owner string, env envstore.Env) error {
	if env.RootDir == "" {
		return nil
	}
	se, err := s.session(id, owner)
	if err != nil {
		return err
	}
	seeded, err := s.envs.Seed(ctx, se, env)
	if err != nil || seeded.Bytes == 0 && len(seeded.Skipped) == 0 {
		return err
	}
	ev := Event{Kind: EventEnvironment, Action: "seed", Code: env.Name, Outcome: "success",
		Detail: fmt.Sprintf("%s: %d bytes of the environment's %s copied into its workspace", se.ID(), seeded.Bytes, seeded.Home)}
	if len(seeded.Skipped) > 0 {
		ev.Outcome = "partial"
		ev.Detail += "; left out: " + strings.Join(seeded.Skipped, "; ")
	}
	s.emit(ctx, ev)
	return nil
}

// startEnvironmentOrDrop runs environment e's start and ready commands in
// session id, just opened (new, or back from a snapshot, a fork or a
// park) (envs.Start): a session that does not become ready is closed,
// and the error says why. (A parked session's copy is deleted only once
// it is back, so a failed start loses nothing.)
func (s *Service) startEnvironmentOrDrop(ctx context.Context, id, owner string, e envstore.Env) error {
	if e.StartCmd == "" && e.ReadyCmd == "" {
		return nil
	}
	se, err := s.session(id, owner)
	if err != nil {
		return err
	}
	if err := s.envs.Start(ctx, se, e); err != nil {
		s.sessions.Drop(se)
		return err
	}
	return nil
}

// sessionRebooted runs the environment's start and ready commands again
// in a session whose sandbox started afresh on its workspace (a resume
// after a pause without memory, which ended them).
func (s *Service) sessionRebooted(ctx context.Context, se *session.Session) error {
	return s.envs.Start(ctx, se, se.Environment())
}

// dropSession closes session id, which was opened for a request that
// failed after all.
func (s *Service) dropSession(id, owner string) {
	if se, err := s.session(id, owner); err == nil {
		s.sessions.Drop(se)
	}
}
