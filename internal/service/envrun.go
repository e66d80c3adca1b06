package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// Runs, sessions and commands started from an environment (envstore):
// the record looked up by name, its root, layer, Python and variables
// given to the sandbox (fleet.Work.FromEnvironment), its modules to the
// import policy, and its warm pool made on demand (fleet.TakeIn).

// ErrEnvironmentNotFound: a run or session names an environment the
// operator has not built (or has removed).
var ErrEnvironmentNotFound = errors.New("environment not found")

// environmentOf is the environment name names ("": the operator's
// default, SANDBOX_DEFAULT_ENVIRONMENT; none: the host's root, the zero
// Env).
func (s *Service) environmentOf(name string) (envstore.Env, error) {
	if name == "" {
		name = s.cfg.DefaultEnvironment
	}
	if name == "" {
		return envstore.Env{}, nil
	}
	if !envstore.NamePattern.MatchString(name) {
		return envstore.Env{}, fmt.Errorf("%w: environment %s: %v", ErrInvalidRequest, Quote(name), envstore.ErrBadName)
	}
	var e envstore.Env
	err := envstore.ErrNotFound
	if s.envs != nil {
		e, err = s.envs.Get(name)
	}
	switch {
	case errors.Is(err, envstore.ErrNotFound):
		return envstore.Env{}, fmt.Errorf("%w: %s (the operator builds environments with codecage env build; codecage env list shows them)", ErrEnvironmentNotFound, Quote(name))
	case err != nil:
		return envstore.Env{}, fmt.Errorf("%w: environment %s: %v", ErrUnavailable, Quote(name), err)
	}
	return e, nil
}

// withEnvironment lets an import policy import the environment's modules
// too, as withLayer does the operator's layer's.
func withEnvironment(p policy.ImportPolicy, e envstore.Env) policy.ImportPolicy {
	if p.Modules == nil || len(e.Modules) == 0 {
		return p
	}
	mods := slices.Clone(p.Modules)
	for _, m := range e.Modules {
		if !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	p.Modules = mods
	return p
}

// envClass is the class of pooled sandboxes of environment e for runs of
// profile class name on backend: made by the fleet at its first use.
func (s *Service) envClass(backend, name string, e envstore.Env) fleet.ClassSpec {
	c := s.cfg
	memory, dataScience := c.MemoryLimit, name == policy.DataScience
	if dataScience {
		memory = c.DataMemory
	}
	w := s.pooledWork(memory, dataScience)
	w.Preimport = e.Preimport
	w = w.FromEnvironment(e)
	return fleet.ClassSpec{Backend: backend, Name: name, Ready: c.EnvPoolSize, Zygote: c.Zygote,
		Interpreter: w.Interpreter, Env: e.ID, Variant: envVariant(e), Spec: w.Spec()}
}

// envVariant tells apart records of one content (one ID) whose sandboxes
// start differently: their Python, preimports or variables.
func envVariant(e envstore.Env) string {
	b, _ := json.Marshal(struct {
		Root, Layer, Python string
		Preimport           []string
		Vars                map[string]string
	}{e.RootDir, e.LayerDir, e.Python, e.Preimport, e.Vars})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// takeInEnvironment is sandboxFor's pooled sandbox from environment e:
// its class's, made on demand; pooled is false when none serves the run.
func (s *Service) takeInEnvironment(ctx context.Context, backend, class string, e envstore.Env, l fleet.Limits) (*fleet.Lease, bool, error) {
	return s.fleet.TakeIn(ctx, s.envClass(backend, class, e), l)
}

// forgetEnvironment drops what runs kept of an environment that was
// removed (its ID): its pools and zygotes, and its commands' programs.
// The environments' removal calls it.
func (s *Service) forgetEnvironment(id string) {
	s.fleet.CloseClass(id)
	s.envPrograms.forget(id)
}

// envProgramCache keeps the programs of the commands resolved in each
// environment's root (roots are immutable: once per root).
type envProgramCache struct {
	mu sync.Mutex
	m  map[string]envPrograms // by environment ID
}

type envPrograms struct {
	root     string
	programs *fleet.Programs
}

func (c *envProgramCache) get(e envstore.Env, resolve func() (*fleet.Programs, error)) (*fleet.Programs, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.m[e.ID]; ok && p.root == e.RootDir {
		return p.programs, nil
	}
	p, err := resolve()
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]envPrograms{}
	}
	c.m[e.ID] = envPrograms{root: e.RootDir, programs: p}
	return p, nil
}

func (c *envProgramCache) forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}

// withEnvVars are environment e's variables with vars (a session's own)
// over them.
func withEnvVars(e envstore.Env, vars map[string]string) map[string]string {
	if len(e.Vars) == 0 {
		return vars
	}
	out := maps.Clone(e.Vars)
	maps.Copy(out, vars)
	return out
}

// lstatIn describes p (an absolute path of the sandbox) within the host
// directory root, a component at a time, refusing a symlink anywhere but
// the last component: an image's links point into its own tree, and are
// never followed on the host, where they could lead out of it.
func lstatIn(root, p string) (os.FileInfo, error) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return os.Lstat(root)
	}
	parts := strings.Split(rel, "/")
	at := root
	for i, part := range parts {
		at = filepath.Join(at, part)
		fi, err := os.Lstat(at)
		if err != nil {
			return nil, err
		}
		if i < len(parts)-1 && !fi.IsDir() {
			return nil, fmt.Errorf("%s: %w", p, errNotInRoot)
		}
		if i == len(parts)-1 {
			return fi, nil
		}
	}
	return nil, os.ErrNotExist
}

// errNotInRoot: a path passes through a symlink (or a file) of the root.
var errNotInRoot = errors.New("passes through a link of the environment's root")

// sessionInEnvironment is req as environment e shapes it: a session that
// names no home gets the environment's working directory as its home,
// when a sandbox can have it there (/workspace or /home/<name>).
func sessionInEnvironment(req SessionRequest, e envstore.Env) SessionRequest {
	// The session records the environment it got (the default one too):
	// its snapshots and forks start from that one.
	req.Environment = e.Name
	if req.Home == "" && e.Workdir != "" && e.Workdir != fleet.WorkspaceDir && fleet.CheckHome(e.Workdir) == nil {
		req.Home = e.Workdir
	}
	return req
}
