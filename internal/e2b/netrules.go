package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
)

// E2B's network rules (SandboxNetworkConfig.rules): per host, transforms
// of the sandbox's outbound HTTPS requests; the one transform is headers
// to set, whose values the SDK resolved on the caller's side. They map
// onto egress credentials whose secrets are the sandbox's own: kept
// sealed outside it, added by its proxy, never in its copies.

// e2bRule is one SandboxNetworkRule.
type e2bRule struct {
	Transform *struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
}

// inlineCredentials reads rules (absent: none), host by host and header
// by header in order, a binding each.
func inlineCredentials(raw json.RawMessage) ([]service.InlineCredential, error) {
	if !given(raw) {
		return nil, nil
	}
	var rules map[string][]json.RawMessage
	if err := json.Unmarshal(raw, &rules); err != nil {
		return nil, fmt.Errorf("%w: network.rules: want {host: [{transform: {headers: {name: value}}}]}: %v", service.ErrInvalidRequest, err)
	}
	var out []service.InlineCredential
	for _, host := range slices.Sorted(maps.Keys(rules)) {
		for _, one := range rules[host] {
			var r e2bRule
			dec := json.NewDecoder(bytes.NewReader(one))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&r); err != nil {
				return nil, fmt.Errorf("%w: network.rules[%s]: a rule is {transform: {headers: {name: value}}}: %v", service.ErrInvalidRequest, service.Quote(host), err)
			}
			if r.Transform == nil {
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(r.Transform.Headers)) {
				out = append(out, service.InlineCredential{
					Binding: service.EgressCredential{Name: host + " " + name, Host: host, Header: name},
					Value:   r.Transform.Headers[name],
				})
			}
		}
	}
	return out, nil
}

// checkedRules are rules read and checked, before any sandbox is touched.
func checkedRules(raw json.RawMessage) ([]service.InlineCredential, error) {
	creds, err := inlineCredentials(raw)
	if err != nil {
		return nil, err
	}
	return creds, service.CheckInlineCredentials(creds)
}

// rulesOf are the sandbox's bindings as getInfo tells E2B's rules: each
// header named, its value never repeated.
func rulesOf(list []service.EgressCredential) map[string][]wire.NetworkRule {
	if len(list) == 0 {
		return nil
	}
	out := map[string][]wire.NetworkRule{}
	for _, b := range list {
		name := b.Header
		if name == "" {
			continue // a placeholder binding, set through REST or MCP
		}
		rs := out[b.Host]
		if len(rs) == 0 {
			rs = []wire.NetworkRule{{Transform: &wire.NetworkTransform{Headers: map[string]string{}}}}
		}
		rs[0].Transform.Headers[name] = redacted
		out[b.Host] = rs
	}
	return out
}

// redacted stands for a header value getInfo does not repeat.
const redacted = "[added by the egress proxy; not shown]"
