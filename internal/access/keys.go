// Package access decides who may call the service and how often: API keys
// (a name per key) and per-key rate and concurrency limits with a global
// cap. It knows nothing of HTTP or MCP; surfaces and the service use it.
package access

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// MinKeyLength is the shortest key accepted: a guessable key is no key.
const MinKeyLength = 16

var keyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Keys maps API keys to their names. The zero value has no keys.
type Keys struct {
	names  []string
	hashes [][sha256.Size]byte // hashes[i] is the key of names[i]
}

// ParseKeys reads "name:key,name2:key2" (SANDBOX_API_KEYS). Names must be
// unique, keys unique and at least MinKeyLength characters.
func ParseKeys(spec string) (*Keys, error) {
	k := &Keys{}
	for _, item := range strings.Split(spec, ",") {
		if item = strings.TrimSpace(item); item != "" {
			if err := k.add(item); err != nil {
				return nil, err
			}
		}
	}
	return k, nil
}

// LoadKeysFile reads one "name:key" per line (SANDBOX_API_KEYS_FILE);
// blank lines and lines starting with # are skipped.
func LoadKeysFile(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("API keys file: %w", err)
	}
	defer f.Close()
	k := &Keys{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := k.add(line); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("API keys file: %w", err)
	}
	return k, nil
}

// Merge adds other's keys to k.
func (k *Keys) Merge(other *Keys) error {
	for i, name := range other.names {
		if err := k.insert(name, other.hashes[i]); err != nil {
			return err
		}
	}
	return nil
}

func (k *Keys) add(item string) error {
	name, key, ok := strings.Cut(item, ":")
	name, key = strings.TrimSpace(name), strings.TrimSpace(key)
	if !ok || name == "" {
		return errors.New(`an API key entry is not "name:key"`)
	}
	if !keyName.MatchString(name) {
		return fmt.Errorf("API key name %q: use letters, digits, '.', '_' and '-' (at most 64)", name)
	}
	if len(key) < MinKeyLength {
		return fmt.Errorf("API key %q is %d characters; use at least %d (for example: openssl rand -hex 32)", name, len(key), MinKeyLength)
	}
	return k.insert(name, sha256.Sum256([]byte(key)))
}

func (k *Keys) insert(name string, h [sha256.Size]byte) error {
	for i, n := range k.names {
		if n == name {
			return fmt.Errorf("API key name %q appears twice", name)
		}
		if k.hashes[i] == h {
			return fmt.Errorf("API keys %q and %q are the same key", n, name)
		}
	}
	k.names = append(k.names, name)
	k.hashes = append(k.hashes, h)
	return nil
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.names)
}

// Names lists the key names, sorted.
func (k *Keys) Names() []string {
	out := append([]string(nil), k.names...)
	sort.Strings(out)
	return out
}

// Lookup returns the name of the key token, comparing against every key
// in constant time so that timing tells nothing about near misses.
func (k *Keys) Lookup(token string) (string, bool) {
	if k == nil || token == "" {
		return "", false
	}
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range k.hashes {
		if subtle.ConstantTimeCompare(h[:], k.hashes[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return k.names[found], true
}
