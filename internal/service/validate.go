package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/check"
	"github.com/codecage/codecage/internal/service/sizing"
)

// Validation is validate_code's answer: the analysis of the code, its
// findings and whether it would pass the run's import policy.
type Validation = fleet.Validation

// ValidateRequest asks whether code would pass the policy of a run with
// these profiles and imports, without running it.
type ValidateRequest struct {
	Code           string
	Profiles       []string
	AllowedImports []string
}

// Validate analyzes code statically with Python's own parser, inside a
// sandbox: the server never parses untrusted code itself.
func (s *Service) Validate(ctx context.Context, req ValidateRequest) (*Validation, error) {
	var backend string
	return do(ctx, s, opValidate, call[*Validation]{
		profile: strings.Join(req.Profiles, ","), code: req.Code,
		run: func(ctx context.Context) (v *Validation, err error) {
			v, backend, err = s.validate(ctx, req)
			return v, err
		},
		success: func(v *Validation, took time.Duration) Event {
			outcome := "valid"
			if !v.Validation.Valid {
				outcome = "invalid"
			}
			return Event{Kind: EventValidate, Profile: strings.Join(req.Profiles, ","), Backend: backend, Code: req.Code, Outcome: outcome, Duration: took}
		},
	})
}

// validate returns the analysis, and the backend that ran the analyzer.
func (s *Service) validate(ctx context.Context, req ValidateRequest) (*Validation, string, error) {
	if err := check.Code(req.Code, s.cfg.MaxCodeSize); err != nil {
		return nil, "", err
	}
	imports, err := s.resolveImports(req.Profiles, req.AllowedImports)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	profiles := map[string][]string{}
	settings := map[string]string{}
	for _, p := range policy.Profiles {
		profiles[p.Name] = p.Modules
		if p.Setting != "" {
			settings[p.Name] = p.Setting + "=true"
		}
	}
	backend, err := s.backendFor(false) // the operator's: untrusted source meets the parser
	if err != nil {
		return nil, "", err
	}
	lease, err := s.fleet.Start(ctx, backend, fleet.Work{Kind: fleet.Validate, Interpreter: s.cfg.Interpreter, Limits: sizing.Caps(s.cfg).Validate()}.Spec())
	if err != nil {
		return nil, "", s.fleetError(ctx, err)
	}
	v, exit, err := lease.Validate(fleet.ValidateRequest{
		Code: req.Code, AllowedImports: imports.Modules, Profile: imports.Label(),
		Profiles: profiles, Enabled: s.cfg.EnabledProfiles(), Settings: settings,
	})
	if err != nil {
		return nil, "", fmt.Errorf("%w: the analyzer failed (%v; exit %d, limit %q)", ErrUnavailable, err, exit.ExitCode, exit.Limit)
	}
	return v, backend, nil
}
