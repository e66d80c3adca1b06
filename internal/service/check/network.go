package check

import (
	"fmt"

	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// Network is a session's egress rules checked and in their canonical form
// (nil when they take nothing away), or an ErrInvalidRequest naming each
// bad entry. allow_out needs the network profile (hasNetwork): rules
// narrow a session's egress, never grant it; deny_out alone grants
// nothing, and is taken anywhere.
func Network(rules *egress.NetworkRules, hasNetwork bool) (*egress.NetworkRules, error) {
	if rules == nil {
		return nil, nil
	}
	out, err := rules.Normalized()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidRequest, err)
	}
	if out.IsZero() {
		return nil, nil
	}
	if !hasNetwork && len(out.AllowOut) > 0 {
		return nil, fmt.Errorf("%w: network rules: the session has no network (its profiles lack \"network\", which the operator enables with SANDBOX_ENABLE_NETWORK); rules narrow a session's egress, they do not grant it", errdefs.ErrInvalidRequest)
	}
	return &out, nil
}
