package persist

import (
	"errors"
	"fmt"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// A session saved (a snapshot, a fork, a park) comes back in the
// environment it was saved in, by content, not only by name: its spec
// records the environment's name and ID. An environment rebuilt under the
// same name since has another ID (another root, layer or Python), and a
// copy is refused rather than run on it: a memory image must restore on
// the very root it ran on, and a native session's pickled objects and
// pip-installed packages were made against that Python and those modules.
// An environment removed since is named in a clear error. A parked
// session holds no sandbox and no use of its environment: the collector
// may free its root, and the resume then fails, never runs elsewhere.

// snapshotEnvironment is the environment a copy of a session saved with
// spec starts in, with one use counted (release once the copy is in the
// session table). live is the saved session's own environment when it
// still runs (a fork): its root is held by it, so a copy of a live
// session does not depend on the record still being there.
func (p *Persist) snapshotEnvironment(spec snapshotSpec, live envstore.Env) (envstore.Env, func(), error) {
	name := spec.Environment
	if name == "" {
		// Made on the host's root: none, whatever the default is now.
		return envstore.Env{}, func() {}, nil
	}
	if live.ID != "" && live.Name == name && (spec.EnvironmentID == "" || live.ID == spec.EnvironmentID) {
		return live, p.envs.InUse(live.ID), nil
	}
	// The record's read and the use are one step to the collector.
	e, release, err := p.envs.ResolveAndUse(name)
	switch {
	case errors.Is(err, errdefs.ErrEnvironmentNotFound):
		return e, nil, fmt.Errorf("%w: %s, which the saved session ran in, has been removed since (codecage env list shows the environments)",
			errdefs.ErrEnvironmentNotFound, bounded.Quote(name))
	case err != nil:
		return e, nil, err
	case spec.EnvironmentID != "" && e.ID != spec.EnvironmentID:
		release()
		return e, nil, fmt.Errorf("%w: environment %s was rebuilt since the session was saved (its content is %s, the session's was %s): "+
			"a saved session comes back only on the content it ran on", errdefs.ErrSnapshotUnusable, bounded.Quote(name), e.ID, bounded.Quote(spec.EnvironmentID))
	}
	return e, release, nil
}
