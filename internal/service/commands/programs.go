package commands

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/wsfs"
)

// commandSet is the resolved minimal root of the command jail, computed
// once: it depends only on the operator's list.
type commandSet struct {
	once     sync.Once
	programs *fleet.Programs
	err      error
}

// dataFor are files some programs read besides their libraries.
var dataFor = map[string][]string{
	"file": {"/usr/lib/file/magic.mgc", "/usr/share/misc/magic.mgc", "/etc/magic"},
}

// programs are the programs commands may run: the host's, or those of
// environment e's root.
func (c *Commands) programs(ctx context.Context, e envstore.Env) (*fleet.Programs, error) {
	if e.RootDir != "" {
		return c.envPrograms.get(ctx, e, func() (*fleet.Programs, error) {
			names, data := c.needs()
			if slices.Contains(c.cfg.AllowedCommands, "python3") {
				data = append(data, envPythonData(e)...)
			}
			p, err := fleet.ResolveProgramsIn(e.RootDir, names, presentIn(e.RootDir, data))
			if err == nil {
				c.aliasPython(p)
				if len(p.Skipped) > 0 {
					c.o.Log().Warn("environment: files of its root left out of the command jail", "environment", e.Name,
						"skipped", bounded.String(strings.Join(p.Skipped, "; "), 4000))
				}
			}
			return p, err
		})
	}
	c.host.once.Do(func() {
		names, data := c.needs()
		if dir := pythonStdlib(c.cfg.AllowedCommands); dir != "" {
			data = append(data, dir)
		}
		c.host.programs, c.host.err = fleet.ResolvePrograms(names, presentIn("", data))
		if c.host.err == nil {
			c.aliasPython(c.host.programs)
		}
	})
	return c.host.programs, c.host.err
}

// needs are the programs commands may run (the shell and
// SANDBOX_ALLOWED_COMMANDS) and the data files some of them read.
func (c *Commands) needs() (names, data []string) {
	names = append([]string{"sh"}, c.cfg.AllowedCommands...)
	for _, n := range names {
		data = append(data, dataFor[n]...)
	}
	// The locale, and the terminal descriptions a program on a
	// terminal reads (bash's line editing, tput).
	data = append(data, "/usr/lib/locale/C.utf8", "/lib/terminfo", "/usr/share/terminfo")
	return names, data
}

// aliasPython: scripts and agents say python (E2B's images have it); it
// is the python3 already allowed.
func (c *Commands) aliasPython(p *fleet.Programs) {
	if slices.Contains(c.cfg.AllowedCommands, "python3") {
		p.Alias("python", "python3")
	}
}

// presentIn are the paths of data that exist in root ("": the host's),
// looked up without following a symlink out of it.
func presentIn(root string, data []string) []string {
	var out []string
	for _, d := range data {
		if root == "" {
			if _, err := os.Stat(d); err == nil {
				out = append(out, d)
			}
		} else if _, err := wsfs.LstatIn(root, d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// envPythonData are the directories an environment's python3 reads, as
// its root lays them out: the standard library beside its prefix
// (/usr/bin/python3 -> /usr/lib/python3.11; /usr/local/bin/python3 ->
// /usr/local/lib/python3.12, whose site-packages an image's pip filled)
// and Debian's package directories. The image's packages are what it is
// for; presentIn keeps those that exist.
func envPythonData(e envstore.Env) []string {
	major, minor, ok := strings.Cut(e.PythonVersion, ".")
	if !ok || e.Python == "" {
		return nil
	}
	minor, _, _ = strings.Cut(minor, ".")
	v := "python" + major + "." + minor
	prefix := path.Dir(path.Dir(e.Python))
	return []string{path.Join(prefix, "lib", v), "/usr/lib/python3/dist-packages", "/usr/local/lib/" + v + "/dist-packages"}
}

// pythonStdlib is the standard library of an allowed python3.
func pythonStdlib(commands []string) string {
	for _, c := range commands {
		if c != "python3" && !strings.HasPrefix(c, "python3.") {
			continue
		}
		for _, dir := range fleet.ProgramSearchPath {
			real, err := filepath.EvalSymlinks(filepath.Join(dir, c))
			if err == nil {
				lib := "/usr/lib/" + filepath.Base(real) // /usr/bin/python3.11 -> /usr/lib/python3.11
				if _, err := os.Stat(lib); err == nil {
					return lib
				}
			}
		}
	}
	return ""
}

// Info lists what run_command may run on this host.
func (c *Commands) Info() (allowed, missing []string) {
	p, err := c.programs(context.Background(), envstore.Env{})
	if err != nil || p == nil {
		return c.cfg.AllowedCommands, nil
	}
	for _, name := range c.cfg.AllowedCommands {
		if _, ok := p.Names[name]; ok {
			allowed = append(allowed, name)
		}
	}
	for name := range p.Aliases {
		if !slices.Contains(allowed, name) {
			allowed = append(allowed, name)
		}
	}
	return allowed, p.Missing
}

// ForgetEnvironment drops the programs resolved in the root of a removed
// environment (its ID).
func (c *Commands) ForgetEnvironment(id string) { c.envPrograms.forget(id) }

// envProgramCache keeps the programs of the commands resolved in each
// environment's root (roots are immutable: once per root). Its lock
// guards the map only: a resolution reads a root an image's author made,
// and one environment's must never hold up another's (or env rm). The
// commands of one environment wait for its one resolution, which the
// resolver bounds in time (jail.ResolveBudget), or for their context.
type envProgramCache struct {
	mu sync.Mutex
	m  map[string]*envPrograms // by environment ID
}

type envPrograms struct {
	root     string
	done     chan struct{} // closed once programs and err are set
	programs *fleet.Programs
	err      error
}

func (c *envProgramCache) get(ctx context.Context, e envstore.Env, resolve func() (*fleet.Programs, error)) (*fleet.Programs, error) {
	c.mu.Lock()
	p, ok := c.m[e.ID]
	if !ok || p.root != e.RootDir {
		p = &envPrograms{root: e.RootDir, done: make(chan struct{})}
		if c.m == nil {
			c.m = map[string]*envPrograms{}
		}
		c.m[e.ID] = p
		c.mu.Unlock()
		defer close(p.done)
		p.programs, p.err = resolve()
		if p.err != nil {
			// Not kept: the next command tries again.
			c.mu.Lock()
			if c.m[e.ID] == p {
				delete(c.m, e.ID)
			}
			c.mu.Unlock()
		}
		return p.programs, p.err
	}
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.programs, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *envProgramCache) forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
