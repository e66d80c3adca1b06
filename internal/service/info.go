package service

import (
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/info"
)

// What this server offers (internal/service/info builds it; info
// documents each type). Aliases of types of the same names: the OpenAPI
// schema keeps their names.
type (
	Info           = info.Info
	PackagesInfo   = info.PackagesInfo
	CommandsInfo   = info.CommandsInfo
	ProfileInfo    = info.ProfileInfo
	ResourceLimits = info.ResourceLimits
	ContainerMode  = info.ContainerMode
	NetworkInfo    = info.NetworkInfo
	IsolationInfo  = info.IsolationInfo
)

// Info returns the server's capabilities and configuration.
func (s *Service) Info() Info {
	allowed, missing := s.CommandsInfo()
	out := info.Build(s.cfg, s.LayerPackages(), allowed, missing)
	if s.cfg.EnableNetwork {
		out.Network.TrustStore = fleet.TrustDir
		for _, b := range s.operatorCreds.Bindings {
			out.Network.Credentials = append(out.Network.Credentials, b.Label()+"@"+b.Host)
		}
	}
	return out
}
