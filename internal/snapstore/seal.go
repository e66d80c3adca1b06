package snapstore

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// record is a sealed manifest as a backend stores it: the manifest's JSON,
// byte for byte as sealed, and the seal.
type record struct {
	raw  []byte
	seal []byte
}

// Domain separation: a blob MAC can never pass for a seal, nor the reverse.
const (
	sealDomain = "codecage snapshot manifest v1"
	blobDomain = "codecage snapshot blob v1"
)

// sealOf is the HMAC of a manifest's bytes.
func (s *Store) sealOf(raw []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(sealDomain))
	h.Write([]byte{0})
	h.Write(raw)
	return h.Sum(nil)
}

// blobMAC starts the MAC of one blob: bound to its owner, snapshot and
// name (each length-prefixed), so that a blob moved to another snapshot,
// owner or name fails verification.
func (s *Store) blobMAC(owner, id, name string) hash.Hash {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(blobDomain))
	for _, f := range []string{owner, id, name} {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(f))))
		h.Write([]byte(f))
	}
	return h
}

// seal encodes m and seals it.
func (s *Store) seal(m Manifest) (record, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return record{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return record{raw: raw, seal: s.sealOf(raw)}, nil
}

// open verifies r's seal, then decodes it and checks that it belongs to
// owner: a sealed manifest shown under another owner is tampered with.
func (s *Store) open(r record, owner string) (Manifest, error) {
	if len(r.raw) > maxManifestLen || !hmac.Equal(r.seal, s.sealOf(r.raw)) {
		return Manifest{}, fmt.Errorf("%w: the manifest's seal does not match (changed, or sealed with another secret)", ErrTampered)
	}
	var m Manifest
	if err := json.Unmarshal(r.raw, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: sealed manifest does not decode: %v", ErrTampered, err)
	}
	if m.Version != FormatVersion && m.Version != fileSetVersion {
		return Manifest{}, fmt.Errorf("%w: manifest format %d, this program reads %d", ErrInvalid, m.Version, FormatVersion)
	}
	if m.Owner != owner {
		return Manifest{}, fmt.Errorf("%w: the snapshot belongs to another owner", ErrTampered)
	}
	return m, nil
}

// loadSecret is the key: the configured secret, else (directory store
// only) the one generated into SecretFile.
func loadSecret(o Options) ([]byte, error) {
	if o.Secret != "" {
		if len(o.Secret) < MinSecretLen {
			return nil, fmt.Errorf("%w: SANDBOX_SNAPSHOT_SECRET is %d characters, want at least %d (e.g. openssl rand -hex 32)", ErrInvalid, len(o.Secret), MinSecretLen)
		}
		return []byte(o.Secret), nil
	}
	if o.DSN != "" {
		return nil, fmt.Errorf("%w: snapshots kept in PostgreSQL need SANDBOX_SNAPSHOT_SECRET (at least %d characters, the same on every replica, e.g. openssl rand -hex 32): each replica must verify what the others sealed", ErrNoSecret, MinSecretLen)
	}
	if o.SecretFile == "" {
		return nil, fmt.Errorf("%w: no SANDBOX_SNAPSHOT_SECRET and no file to keep a generated one in", ErrNoSecret)
	}
	return secretFile(o.SecretFile)
}

// secretFile reads the generated secret, making it the first time: written
// under a temporary name, then linked into place, so that a crash never
// leaves a short secret and two servers starting at once agree on one.
func secretFile(path string) ([]byte, error) {
	if b, err := readSecretFile(path); !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%w: snapshot secret: %v", ErrUnavailable, err)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".snapshot-secret-*")
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot secret: %v", ErrUnavailable, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(raw) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path) // CreateTemp made it 0600
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%w: snapshot secret: %v", ErrUnavailable, err)
	}
	return readSecretFile(path)
}

func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: snapshot secret: %v", ErrUnavailable, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot secret: %v", ErrUnavailable, err)
	}
	if st.Mode().Perm()&0o077 != 0 || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: snapshot secret %s is readable by others (mode %v): chmod 600 it", ErrInvalid, path, st.Mode())
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	s := strings.TrimSpace(string(b[:n]))
	if len(s) < MinSecretLen {
		return nil, fmt.Errorf("%w: snapshot secret %s holds %d characters, want at least %d", ErrInvalid, path, len(s), MinSecretLen)
	}
	return []byte(s), nil
}

// Key is the server's snapshot secret as o names it (configured, or the
// directory store's generated one): other stores sealed with the same
// secret (the vault of egress secrets) derive their keys from it.
func Key(o Options) ([]byte, error) { return loadSecret(o) }
