package service

import (
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fleet"
)

// proxyPort is where the egress proxy appears on the sandbox's loopback.
const proxyPort = 3128

// startEgress runs a proxy for one sandbox: connections to the sandbox's
// 127.0.0.1:3128 arrive through the jail's Forward and are served under the
// operator's allow list; refused, when set, hears of each host it refuses.
// The caller closes the proxy when the run (or the session) ends.
func (s *Service) startEgress(label string, refused func(host string)) (*egress.Proxy, *fleet.Forward) {
	p := egress.New(s.egress, s.egressOptions(label, refused))
	return p, &fleet.Forward{Port: proxyPort, Handle: p.ServeHandedOff(proxyPort)}
}

// egressOptions are a sandbox's proxy's: its label, the service's log, and
// refused told of each host it refuses.
func (s *Service) egressOptions(label string, refused func(host string)) egress.Options {
	opts := egress.Options{Label: label, Logger: s.log()}
	if refused != nil {
		opts.OnDecision = func(d egress.Decision) {
			if !d.Allowed {
				refused(d.Host)
			}
		}
	}
	return opts
}
