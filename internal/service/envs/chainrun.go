package envs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// Stage is one environment build of a chain.
type Stage struct {
	Build BuildRequest
	// Step is the first step of the plan it builds (for a failure's reason).
	Step string
	// Copies are the uploads (files hash) its Dockerfile COPYs; each is
	// unpacked into the build context as a directory of that name.
	Copies []string
	// What says what it does, for the chain's log.
	What string
	// Shared marks a Debian root kept for every chain that asks for the
	// same release and packages (its name is a short hash of them): built
	// once, reused while it exists, never removed by a chain's failure or
	// its environment's removal.
	Shared bool
}

// ChainOps are the root's own operations a chain's stages go through, so
// that each is admitted and audited as the operator's build or removal.
type ChainOps interface {
	Build(ctx context.Context, b BuildRequest) (envstore.Env, error)
	Remove(ctx context.Context, name string) error
}

// stageName matches the environments a chain builds before its last
// (name.bXXXXXXXX.N); no environment built as a chain's last takes such
// a name.
var stageName = regexp.MustCompile(`\.b[0-9a-f]{8}\.[0-9]{1,3}$`)

// IsStage reports whether name is an intermediate stage of a chain.
func IsStage(name string) bool { return stageName.MatchString(name) }

// StagePrefix names the intermediate environments of chain id of name:
// the prefix, then "." and the stage's index.
func StagePrefix(name, id string) string {
	return name[:min(len(name), 50)] + ".b" + strings.ReplaceAll(id, "-", "")[:8]
}

// RequestChain records a chain of name for owner, to be started, and
// returns its id.
func (d *Envs) RequestChain(name, owner string) (string, error) {
	c, err := d.chains.add(newChainID(), name, owner)
	if err != nil {
		return "", err
	}
	return c.id, nil
}

// StartChain marks owner's chain id of name started (once) and returns it.
func (d *Envs) StartChain(name, id, owner string) (*Chain, error) {
	c := d.chains.get(name, id, owner)
	if c == nil {
		return nil, fmt.Errorf("%w: template build %s", errdefs.ErrNotFound, bounded.Quote(id))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return nil, fmt.Errorf("%w: template build %s", ErrChainStarted, c.id)
	}
	c.started = true
	return c, nil
}

// Prefix names the chain's intermediate environments (StagePrefix).
func (c *Chain) Prefix() string { return StagePrefix(c.name, c.id) }

// FailChain ends a chain that will not run (its plan failed) with f.
func (d *Envs) FailChain(c *Chain, f *Failure) {
	d.uploads.drop(c.name)
	c.finish(f)
}

// ChainPage is owner's chain id of name, with its log from offset on (at
// most limit entries); errdefs.ErrNotFound when it is not kept.
func (d *Envs) ChainPage(name, id, owner string, offset, limit int) (ChainPage, error) {
	c := d.chains.get(name, id, owner)
	if c == nil {
		return ChainPage{}, fmt.Errorf("%w: template build %s (the server keeps its last %d builds)", errdefs.ErrNotFound, bounded.Quote(id), MaxChainsKept)
	}
	return c.page(offset, limit), nil
}

// LatestChain is the id of the newest chain of name kept ("": none).
func (d *Envs) LatestChain(name string) string {
	if c := d.chains.latest(name); c != nil {
		return c.id
	}
	return ""
}

// RunChain builds c's stages in order, at most SANDBOX_ENV_MAX_BUILDS
// chains at once (the others wait, their status ChainWaiting), and
// records the outcome; a failed stage removes the stages it made before.
// Its uploads go when it ends. The caller runs it on a goroutine the
// service's shutdown waits for, and ends ctx then.
func (d *Envs) RunChain(ctx context.Context, c *Chain, stages []Stage, ops ChainOps) {
	defer d.uploads.drop(c.name)
	select {
	case d.chains.slots <- struct{}{}:
		defer func() { <-d.chains.slots }()
	case <-ctx.Done():
		c.finish(&Failure{Step: "base", Message: "building template " + c.name + " did not start: " + ctx.Err().Error()})
		return
	}
	c.mu.Lock()
	c.status = ChainBuilding
	c.mu.Unlock()
	c.finish(d.runChain(ctx, c, stages, ops))
}

func (d *Envs) runChain(ctx context.Context, c *Chain, stages []Stage, ops ChainOps) *Failure {
	var made []string
	fail := func(st Stage, err error) *Failure {
		for i := len(made) - 1; i >= 0; i-- {
			_ = ops.Remove(ctx, made[i])
		}
		return &Failure{Step: st.Step, Message: "building template " + c.name + " failed at " + st.What + ": " + capText(err.Error(), maxChainLogCut)}
	}
	for i, st := range stages {
		c.log("info", st.Step, fmt.Sprintf("stage %d of %d: %s into environment %s", i+1, len(stages), st.What, st.Build.Name))
		if st.Shared {
			// Chains that share a root wait for one another's build of it.
			d.chains.sharedMu.Lock()
			reused, err := d.buildShared(ctx, c, st, ops)
			d.chains.sharedMu.Unlock()
			if err != nil {
				return fail(st, err)
			}
			if reused {
				c.log("info", st.Step, "reusing the Debian root "+st.Build.Name+" built before for the same release and packages")
			}
			continue
		}
		if i == len(stages)-1 && d.Exists(st.Build.Name) {
			// A rebuild replaces the environment (E2B builds a new version).
			c.log("info", st.Step, "replacing the existing environment "+st.Build.Name)
			if err := d.removeChained(ctx, ops, st.Build.Name, c.Prefix()); err != nil {
				return fail(st, err)
			}
		}
		if err := d.buildStage(ctx, c, st, ops); err != nil {
			return fail(st, err)
		}
		made = append(made, st.Build.Name)
	}
	c.log("info", "finalize", "template "+c.name+" is ready: Sandbox.create("+bounded.Quote(c.name)+") starts from it")
	return nil
}

// buildShared builds a shared stage unless its environment exists and is
// what the stage asks for (reused true).
func (d *Envs) buildShared(ctx context.Context, c *Chain, st Stage, ops ChainOps) (reused bool, err error) {
	if e, err := d.Get(st.Build.Name); err == nil {
		if e.Source.Kind != "debian" || e.Source.Ref != st.Build.Suite || !slices.Equal(e.Source.Packages, st.Build.Debian) {
			return false, fmt.Errorf("environment %s exists and is not the Debian root %s %v: remove it (codecage env rm %s)", st.Build.Name, st.Build.Suite, st.Build.Debian, st.Build.Name)
		}
		return true, nil
	}
	return false, d.buildStage(ctx, c, st, ops)
}

// buildStage builds one stage, its uploads unpacked into its context.
func (d *Envs) buildStage(ctx context.Context, c *Chain, st Stage, ops ChainOps) error {
	build := st.Build
	build.Log = c
	if build.Dockerfile != "" {
		dir, err := d.uploads.context(c.name, st.Copies)
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		build.ContextDir = dir
	}
	_, err := ops.Build(ctx, build)
	return err
}

// RemoveChained removes environment name, the intermediate stages its
// chains left and its uploads.
func (d *Envs) RemoveChained(ctx context.Context, ops ChainOps, name string) error {
	d.uploads.drop(name)
	return d.removeChained(ctx, ops, name, "")
}

// removeChained removes environment name and the intermediate stages its
// chains left, but those of keepPrefix (the chain running now).
func (d *Envs) removeChained(ctx context.Context, ops ChainOps, name, keepPrefix string) error {
	if err := ops.Remove(ctx, name); err != nil && !errors.Is(err, envstore.ErrNotFound) {
		return err
	}
	envs, _ := d.List()
	mine := name[:min(len(name), 50)] + ".b"
	for _, e := range envs {
		if strings.HasPrefix(e.Name, mine) && IsStage(e.Name) && len(e.Name) <= len(mine)+8+4 &&
			(keepPrefix == "" || !strings.HasPrefix(e.Name, keepPrefix+".")) {
			_ = ops.Remove(ctx, e.Name)
		}
	}
	return nil
}

// newChainID is a random UUID (E2B's build ids are).
func newChainID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
