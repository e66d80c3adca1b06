// Package vault keeps the secrets owners give the server (API keys the
// egress proxy adds to a sandbox's requests), sealed with AES-256-GCM
// under a key derived from the server's snapshot secret: a copy of the
// directory or the table alone reveals nothing. Values leave it only for
// the proxy; listings give names and dates.
//
// Two backends, as the snapshot store's: a directory (one file a secret,
// written atomically) or the PostgreSQL database replicas share.
package vault

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Errors callers classify.
var (
	ErrNotFound    = errors.New("no such secret")
	ErrInvalid     = errors.New("invalid secret")
	ErrLimit       = errors.New("too many secrets")
	ErrUnavailable = errors.New("secret store unavailable")
)

// Caps: a value is a key or a token, not a file.
const (
	MaxValueBytes = 8 << 10
	MaxPerOwner   = 128
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// CheckName says why name cannot name a secret.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: a secret's name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit (got %q)", ErrInvalid, clip(name))
	}
	return nil
}

// Secret is what a listing tells of one secret.
type Secret struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created_at"`
}

// Options say where the vault is and what seals it.
type Options struct {
	// Dir is the directory backend's; DSN a postgres:// URL instead.
	Dir, DSN string
	// Secret is the snapshot secret (snapstore.Key).
	Secret []byte
	// Timeout bounds each database statement; default 10 s.
	Timeout time.Duration
}

// Vault is an open store of sealed secrets.
type Vault struct {
	b    backend
	aead cipher.AEAD
}

type backend interface {
	put(ctx context.Context, owner, name string, created time.Time, sealed []byte) error
	get(ctx context.Context, owner, name string) ([]byte, error)
	list(ctx context.Context, owner string) ([]Secret, error)
	remove(ctx context.Context, owner, name string) error
	close() error
}

// Open opens the vault o names, creating its directory or table.
func Open(ctx context.Context, o Options) (*Vault, error) {
	if len(o.Secret) == 0 {
		return nil, fmt.Errorf("%w: no key", ErrUnavailable)
	}
	// A key of its own: the snapshot secret also MACs snapshots.
	mac := hmac.New(sha256.New, o.Secret)
	mac.Write([]byte("codecage vault v1"))
	block, err := aes.NewCipher(mac.Sum(nil))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	var b backend
	if o.DSN != "" {
		b, err = openPostgres(ctx, o.DSN, o.Timeout)
	} else {
		b, err = openDir(o.Dir)
	}
	if err != nil {
		return nil, err
	}
	return &Vault{b: b, aead: aead}, nil
}

// Close closes the backend.
func (v *Vault) Close() error { return v.b.close() }

// aad binds a sealed value to its owner and name: a sealed value copied to
// another owner's row does not open.
func aad(owner, name string) []byte {
	return []byte("codecage-secret\x00" + owner + "\x00" + name)
}

// Put stores value as owner's secret name, replacing one of that name.
func (v *Vault) Put(ctx context.Context, owner, name, value string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if value == "" || len(value) > MaxValueBytes {
		return fmt.Errorf("%w: a secret's value is 1 to %d bytes", ErrInvalid, MaxValueBytes)
	}
	nonce := make([]byte, v.aead.NonceSize())
	rand.Read(nonce)
	sealed := v.aead.Seal(nonce, nonce, []byte(value), aad(owner, name))
	return v.b.put(ctx, owner, name, time.Now().UTC().Truncate(time.Second), sealed)
}

// Value is owner's secret name.
func (v *Vault) Value(ctx context.Context, owner, name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	sealed, err := v.b.get(ctx, owner, name)
	if err != nil {
		return "", err
	}
	n := v.aead.NonceSize()
	if len(sealed) < n {
		return "", fmt.Errorf("%w: secret %q is damaged", ErrUnavailable, name)
	}
	plain, err := v.aead.Open(nil, sealed[:n], sealed[n:], aad(owner, name))
	if err != nil {
		return "", fmt.Errorf("%w: secret %q does not open with this server's SANDBOX_SNAPSHOT_SECRET (sealed by another, or altered)", ErrUnavailable, name)
	}
	return string(plain), nil
}

// List names owner's secrets, by name.
func (v *Vault) List(ctx context.Context, owner string) ([]Secret, error) {
	return v.b.list(ctx, owner)
}

// Delete forgets owner's secret name.
func (v *Vault) Delete(ctx context.Context, owner, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return v.b.remove(ctx, owner, name)
}

func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return s
}
