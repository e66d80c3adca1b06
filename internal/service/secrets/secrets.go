// Package secrets is the service's domain of secrets that never enter a
// sandbox: the owners' vault (internal/vault, sealed with the snapshot
// secret, kept where snapshots are), the secrets a sandbox's creator gave
// inline (E2B's network rules: kept in the vault under the sandbox's own
// scope, so a copy of it has none), and each egress proxy's trust store.
package secrets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/snapstore"
	"github.com/codecage/codecage/internal/vault"
)

// Secret is what a listing tells of a secret.
type Secret = vault.Secret

// SandboxPrefix marks a binding's secret as the sandbox's own (given at
// its create), not its owner's: "sandbox:0".
const SandboxPrefix = "sandbox:"

// Domain holds the vault, opened on first use: a database that is down
// then fails that request, not the server's start.
type Domain struct {
	cfg config.Config
	log *slog.Logger

	mu sync.Mutex // guards v
	v  *vault.Vault
}

// New is the domain for the operator's configuration.
func New(cfg config.Config, log *slog.Logger) *Domain {
	return &Domain{cfg: cfg, log: log}
}

// Place is where the vault is: beside the snapshots (a directory
// "secrets" next to theirs), or in their PostgreSQL database.
func Place(cfg config.Config) (dir, dsn string) {
	sdir, sdsn, _ := cfg.SnapshotPlace()
	if sdsn != "" {
		return "", sdsn
	}
	return filepath.Join(filepath.Dir(sdir), "secrets"), ""
}

func (d *Domain) vault(ctx context.Context) (*vault.Vault, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.v != nil {
		return d.v, nil
	}
	dir, dsn := Place(d.cfg)
	sdir, sdsn, secretFile := d.cfg.SnapshotPlace()
	key, err := snapstore.Key(snapstore.Options{Dir: sdir, DSN: sdsn, Secret: d.cfg.SnapshotSecret, SecretFile: secretFile})
	if err != nil {
		return nil, errdefs.Secret(err)
	}
	v, err := vault.Open(ctx, vault.Options{Dir: dir, DSN: dsn, Secret: key})
	if err != nil {
		return nil, errdefs.Secret(err)
	}
	d.v = v
	return v, nil
}

// Close closes the vault.
func (d *Domain) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.v != nil {
		_ = d.v.Close()
		d.v = nil
	}
}

// Put stores owner's secret name (replacing one of that name).
func (d *Domain) Put(ctx context.Context, owner, name, value string) error {
	if err := vault.CheckName(name); err != nil {
		return errdefs.Secret(err)
	}
	if !headerSafe(value) {
		return errdefs.Secret(errInvalid("a secret's value goes into a request header: no line breaks or control characters"))
	}
	v, err := d.vault(ctx)
	if err != nil {
		return err
	}
	return errdefs.Secret(v.Put(ctx, owner, name, value))
}

// List names owner's secrets.
func (d *Domain) List(ctx context.Context, owner string) ([]Secret, error) {
	v, err := d.vault(ctx)
	if err != nil {
		return nil, err
	}
	list, err := v.List(ctx, owner)
	return list, errdefs.Secret(err)
}

// Delete forgets owner's secret name.
func (d *Domain) Delete(ctx context.Context, owner, name string) error {
	v, err := d.vault(ctx)
	if err != nil {
		return err
	}
	return errdefs.Secret(v.Delete(ctx, owner, name))
}

// sandboxOwner is the vault's owner of the secrets sandbox id was given
// at its create: apart from its owner's own. A hash, as a database's text
// takes no NUL and an owner's name may hold any other separator.
func sandboxOwner(owner, id string) string {
	h := sha256.Sum256([]byte(owner + "\x00" + id))
	return "sandbox:" + hex.EncodeToString(h[:])
}

// PutSandbox keeps the values a sandbox's creator gave inline, as
// "sandbox:0", "sandbox:1"... in the order given; they end with it
// (DropSandbox).
func (d *Domain) PutSandbox(ctx context.Context, owner, id string, values []string) ([]string, error) {
	v, err := d.vault(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(values))
	for i, val := range values {
		if !headerSafe(val) {
			return nil, errdefs.Secret(errInvalid("a header value holds line breaks or control characters"))
		}
		n := itoa(i)
		if err := v.Put(ctx, sandboxOwner(owner, id), "s"+n, val); err != nil {
			return nil, errdefs.Secret(err)
		}
		names[i] = SandboxPrefix + n
	}
	return names, nil
}

// DropSandbox forgets the secrets sandbox id was given (it ended).
func (d *Domain) DropSandbox(ctx context.Context, owner, id string) {
	d.PruneSandbox(ctx, owner, id, 0)
}

// PruneSandbox forgets the secrets sandbox id was given from the keep-th
// on (those of an earlier, longer update).
func (d *Domain) PruneSandbox(ctx context.Context, owner, id string, keep int) {
	v, err := d.vault(ctx)
	if err != nil {
		return
	}
	list, err := v.List(ctx, sandboxOwner(owner, id))
	if err != nil {
		return
	}
	for _, s := range list {
		if n, err := strconv.Atoi(strings.TrimPrefix(s.Name, "s")); err != nil || n >= keep {
			_ = v.Delete(ctx, sandboxOwner(owner, id), s.Name)
		}
	}
}

// Resolver gives session id's proxy its secrets: the owner's by name,
// the sandbox's own by "sandbox:N" (a fork, another id, has none).
func (d *Domain) Resolver(owner, id string) egress.SecretFunc {
	return func(ctx context.Context, name string) (string, error) {
		v, err := d.vault(ctx)
		if err != nil {
			return "", err
		}
		if n, ok := strings.CutPrefix(name, SandboxPrefix); ok {
			val, err := v.Value(ctx, sandboxOwner(owner, id), "s"+n)
			if err != nil && strings.Contains(err.Error(), vault.ErrNotFound.Error()) {
				return "", errInvalid("given at this sandbox's create, and not to its copies")
			}
			return val, err
		}
		return v.Value(ctx, owner, name)
	}
}
