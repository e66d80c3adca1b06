package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// newSandbox is E2B's NewSandbox and NewSandboxV2 body. Every field E2B
// defines is here, so that none is dropped unseen: each is honoured,
// refused by refusedFields when given (naming it), or ignored for the
// reason its comment gives. A field E2B does not define is refused too
// (decodeCreate): codecage cannot tell whether it would change what the
// sandbox may reach, mount or keep. The SDK turns its lifecycle option
// into autoPause, autoPauseMemory and autoResume.
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int64            `json:"timeout"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	AutoPause  bool              `json:"autoPause"`
	// AutoPauseMemory false asks for a filesystem-only pause at the
	// timeout (on_timeout pause_files): the sandbox's memory is freed,
	// and a connect starts a fresh interpreter on its files.
	AutoPauseMemory *bool `json:"autoPauseMemory"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	// Secure (NewSandbox v1 only) asks that the daemon want the access
	// token. Ignored: codecage's daemon always wants it, and create
	// always answers it, so false narrows nothing the client can use and
	// widens nothing (the SDK sends the token it is given).
	Secure *bool `json:"secure"`
	// AllowInternetAccess false is E2B's denyOut 0.0.0.0/0: no egress
	// until an update opens some (egressOf).
	// True (the SDKs' default) is what the operator allows: the network
	// profile's proxy to SANDBOX_NETWORK_ALLOW where it is enabled,
	// nothing where it is not; never more. The SDKs send the snake_case
	// name; the camelCase one is read too, a deny never being dropped.
	AllowInternetAccess      *bool          `json:"allow_internet_access"`
	AllowInternetAccessCamel *bool          `json:"allowInternetAccess"`
	Network                  *networkConfig `json:"network"`
	// MCP opens the sandbox's MCP gateway, served from outside it
	// (mcpgateway.go); the servers are the operator's.
	MCP json.RawMessage `json:"mcp"`
	// Refused when given: codecage has none of these (refusedFields).
	VolumeMounts []json.RawMessage `json:"volumeMounts"`
	IAM          *struct {
		Tokens map[string]json.RawMessage `json:"tokens"`
	} `json:"iam"`
}

// networkConfig is E2B's SandboxNetworkConfig.
type networkConfig struct {
	// AllowPublicTraffic true lets the sandbox's ports be reached without
	// its traffic token; unset, SANDBOX_E2B_PUBLIC_TRAFFIC decides.
	AllowPublicTraffic *bool `json:"allowPublicTraffic"`
	// AllowOut and DenyOut are the sandbox's own egress rules, within the
	// operator's allow list (egressOf).
	AllowOut []string `json:"allowOut"`
	DenyOut  []string `json:"denyOut"`
	// Rules are header transforms the proxy applies (netrules.go).
	Rules json.RawMessage `json:"rules"`
	// Refused when given: an egress proxy, HTTPS to the sandbox's ports
	// and a host mask are not codecage's.
	EgressProxy     json.RawMessage   `json:"egressProxy"`
	HTTPSPorts      []json.RawMessage `json:"httpsPorts"`
	MaskRequestHost *string           `json:"maskRequestHost"`
}

// decodeCreate reads a create body; a field E2B's NewSandbox lacks is
// refused by name.
func decodeCreate(r *http.Request, body *newSandbox) error {
	if r.Body == nil {
		return nil
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(body)
	if err == nil || err.Error() == "EOF" {
		return nil
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("create: field %s is not one codecage knows; it is refused, as it might change what the sandbox may reach, mount or keep", name)
	}
	return fmt.Errorf("the body is not the JSON this call takes: %v", err)
}

// given reports whether a JSON value asks for something: not absent,
// null, {} or [].
func given(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", "{}", "[]":
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil && len(m) == 0 {
		return false // {} with spaces inside
	}
	return true
}

// refusedFields names the first field of body that asks for what codecage
// does not have, with why; "" when there is none.
func refusedFields(body *newSandbox) string {
	switch {
	case len(body.VolumeMounts) > 0:
		return "volumeMounts: codecage has no volumes; a sandbox's files are its workspace, kept by pause and snapshots"
	case body.IAM != nil && len(body.IAM.Tokens) > 0:
		return "iam.tokens: codecage issues no identity tokens to a sandbox"
	}
	n := body.Network
	if n == nil {
		return ""
	}
	switch {
	case given(n.EgressProxy):
		return "network.egressProxy: a sandbox's egress goes only through codecage's own proxy"
	case len(n.HTTPSPorts) > 0:
		return "network.httpsPorts: codecage reaches a sandbox's ports over plain HTTP only"
	case n.MaskRequestHost != nil && *n.MaskRequestHost != "":
		return "network.maskRequestHost: codecage passes the request's own Host to a sandbox's ports"
	}
	return ""
}
