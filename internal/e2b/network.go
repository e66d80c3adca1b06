package e2b

import (
	"cmp"
	"net/http"
	"slices"

	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/service"
)

// egressOf is a create's or update's egress as the sandbox's rules: all
// traffic denied when internet access is off (E2B: "the same as denyOut
// 0.0.0.0/0"), so an update may open some; the service checks them.
func egressOf(allowInternet []*bool, allowOut, denyOut []string) service.NetworkRules {
	r := service.NetworkRules{AllowOut: allowOut, DenyOut: denyOut}
	for _, allow := range allowInternet {
		if allow != nil && !*allow {
			r.DenyOut = append(slices.Clone(r.DenyOut), egress.AllTraffic)
			break
		}
	}
	return r
}

// createEgress is egressOf a create's body.
func createEgress(body *newSandbox) *service.NetworkRules {
	n := cmp.Or(body.Network, &networkConfig{})
	if r := egressOf([]*bool{body.AllowInternetAccess, body.AllowInternetAccessCamel}, n.AllowOut, n.DenyOut); !r.IsZero() {
		return &r
	}
	return nil
}

// publicTraffic: the create's allowPublicTraffic, else SANDBOX_E2B_PUBLIC_TRAFFIC.
func (n *networkConfig) publicTraffic(def bool) bool { return *cmp.Or(n.AllowPublicTraffic, &def) }

// updateNetwork is PUT /sandboxes/{id}/network: the running sandbox's
// egress rules replaced, for every connection it opens from now on.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var body wire.NetworkUpdate
	if err := decodeBody(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, "the body must be E2B's network update: {allowOut, denyOut, allow_internet_access}: "+err.Error())
		return
	}
	switch {
	case given(body.EgressProxy):
		writeAPIError(w, http.StatusBadRequest, "egressProxy: a sandbox's egress goes only through codecage's own proxy")
		return
	}
	creds, err := checkedRules(body.Rules)
	if err != nil {
		s.serviceError(w, err)
		return
	}
	if _, ok := s.session(w, r); !ok {
		return
	}
	rules := egressOf([]*bool{body.AllowInternetAccess}, body.AllowOut, body.DenyOut)
	if _, err := s.svc.SetSessionNetwork(r.Context(), r.PathValue("id"), ownerOf(r.Context()), rules); err != nil {
		s.serviceError(w, err)
		return
	}
	if err := s.svc.SetSandboxCredentials(r.Context(), r.PathValue("id"), ownerOf(r.Context()), creds); err != nil {
		s.serviceError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// networkOf is the sandbox's network as E2B's getInfo tells it: its
// rules, and whether ports need the traffic token.
func networkOf(info service.SessionInfo) *wire.NetworkInfo {
	n := cmp.Or(info.Network, &service.NetworkRules{})
	return &wire.NetworkInfo{AllowOut: n.AllowOut, DenyOut: n.DenyOut, AllowPublicTraffic: info.PublicTraffic,
		Rules: rulesOf(info.EgressCredentials)}
}
