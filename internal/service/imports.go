package service

import (
	"fmt"
	"sync"

	"github.com/codecage/codecage/internal/policy"
)

// importCache keeps the import policies already resolved, by request shape.
// Resolving one (with a hint for every profile module it denies) cost a
// sixth of the supervisor's CPU per pooled run, and nearly every request
// asks for one of a handful of shapes.
type importCache struct {
	mu sync.Mutex
	m  map[string]policy.ImportPolicy
}

// importCacheMax bounds the cache; past it, it starts over.
const importCacheMax = 256

// resolveImports is the policy for a request's profiles and imports, the
// operator's package layer included. The result is shared: read it only.
func (s *Service) resolveImports(profiles, imports []string) (policy.ImportPolicy, error) {
	key := fmt.Sprintf("%q %q", profiles, imports)
	c := &s.importCache
	c.mu.Lock()
	p, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := s.cfg.ResolveImports(profiles, imports)
	if err != nil {
		return p, err
	}
	p = s.withLayer(p)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= importCacheMax {
		c.m = map[string]policy.ImportPolicy{}
	}
	c.m[key] = p
	c.mu.Unlock()
	return p, nil
}
