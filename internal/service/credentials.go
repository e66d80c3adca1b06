package service

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/secrets"
)

// Secrets that never enter a sandbox (secrets/): an owner's secrets in
// the vault, and each session's bindings of them to egress rules, which
// its proxy adds to its HTTPS requests. Values go from the vault to the
// proxy alone: never to an event, a log, a snapshot or a reply.

// EgressCredential binds a stored secret to an egress rule.
type EgressCredential = egress.Binding

// SecretInfo is what a listing tells of a secret: its name and date.
type SecretInfo = secrets.Secret

const (
	opSecretPut        = "secret_put"
	opSecretList       = "secret_list"
	opSecretDelete     = "secret_delete"
	opEgressCredential = "egress_credentials"
)

func secretOps() map[string]op {
	return map[string]op{
		opSecretPut:    {admit: admitNone, kind: EventSecret, action: "put"},
		opSecretList:   {admit: admitNone, kind: EventSecret, action: "list", quiet: true},
		opSecretDelete: {admit: admitNone, kind: EventSecret, action: "delete"},
		opEgressCredential: {admit: admitNone, kind: EventSession, action: "egress_credentials",
			peer: peerOp[credentialArgs, []EgressCredential]{do: serveCredentials}},
	}
}

// PutSecret stores owner's secret name, replacing one of that name;
// tunnels its sessions' proxies open from now on use the new value.
func (s *Service) PutSecret(ctx context.Context, owner, name, value string) (SecretInfo, error) {
	return do(ctx, s, opSecretPut, call[SecretInfo]{
		owner: owner,
		run: func(ctx context.Context) (SecretInfo, error) {
			if err := s.secrets.Put(ctx, owner, name, value); err != nil {
				return SecretInfo{}, err
			}
			return SecretInfo{Name: name, Created: time.Now().UTC().Truncate(time.Second)}, nil
		},
		success: func(info SecretInfo, took time.Duration) Event {
			return Event{Kind: EventSecret, Action: "put", Outcome: "success", Duration: took, Detail: info.Name}
		},
	})
}

// ListSecrets names owner's secrets.
func (s *Service) ListSecrets(ctx context.Context, owner string) ([]SecretInfo, error) {
	return do(ctx, s, opSecretList, call[[]SecretInfo]{
		owner: owner,
		run:   func(ctx context.Context) ([]SecretInfo, error) { return s.secrets.List(ctx, owner) },
	})
}

// DeleteSecret forgets owner's secret name: bindings that name it refuse
// the tunnels opened from now on, saying so.
func (s *Service) DeleteSecret(ctx context.Context, owner, name string) error {
	_, err := do(ctx, s, opSecretDelete, call[struct{}]{
		owner: owner,
		run: func(ctx context.Context) (struct{}, error) {
			return struct{}{}, s.secrets.Delete(ctx, owner, name)
		},
		success: func(_ struct{}, took time.Duration) Event {
			return Event{Kind: EventSecret, Action: "delete", Outcome: "success", Duration: took, Detail: name}
		},
	})
	return err
}

// SetSessionCredentials replaces session id's credential bindings while
// it runs; every secret named must be the owner's. It returns them.
func (s *Service) SetSessionCredentials(ctx context.Context, id, owner string, list []EgressCredential) ([]EgressCredential, error) {
	return s.setCredentials(ctx, id, owner, list, false)
}

// setCredentials is SetSessionCredentials; sandboxOwn lets bindings name
// the sandbox's own secrets (E2B's rules, secrets.SandboxPrefix).
func (s *Service) setCredentials(ctx context.Context, id, owner string, list []EgressCredential, sandboxOwn bool) ([]EgressCredential, error) {
	return do(ctx, s, opEgressCredential, call[[]EgressCredential]{
		session: id, owner: owner, args: credentialArgs{List: list, SandboxOwn: sandboxOwn},
		check: func() error { return checkBindings(list, true) },
		run: func(ctx context.Context) ([]EgressCredential, error) {
			se, err := s.session(id, owner)
			if err != nil {
				return nil, err
			}
			if err := checkBindings(list, se.Imports().Uses(policy.Network)); err != nil {
				return nil, err
			}
			if err := s.ownerHolds(ctx, owner, list, sandboxOwn); err != nil {
				return nil, err
			}
			if len(list) == 0 {
				list = nil
			}
			return list, s.sessions.SetCredentials(se, list)
		},
		success: func(list []EgressCredential, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "egress_credentials", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: %s", id, bindingNames(list))}
		},
	})
}

// credentialArgs are setCredentials' between replicas.
type credentialArgs struct {
	List       []EgressCredential `json:"list"`
	SandboxOwn bool               `json:"sandbox_own,omitempty"`
}

func serveCredentials(ctx context.Context, s *Service, call PeerCall, args credentialArgs, _ outputFunc) ([]EgressCredential, error) {
	return s.setCredentials(ctx, call.SessionID, call.Owner, args.List, args.SandboxOwn)
}

// checkBindings refuses bindings that do not parse, and any for a session
// that reaches no host.
func checkBindings(list []EgressCredential, hasNetwork bool) error {
	if err := egress.CheckBindings(list); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if len(list) > 0 && !hasNetwork {
		return fmt.Errorf("%w: egress credentials: the session has no network (its profiles lack \"network\"); a credential goes with a request the proxy lets out", ErrInvalidRequest)
	}
	return nil
}

// ownerHolds refuses bindings naming secrets the owner does not have,
// all named at once: a typo must fail here, not as a refused tunnel.
func (s *Service) ownerHolds(ctx context.Context, owner string, list []EgressCredential, sandboxOwn bool) error {
	var need []string
	for _, b := range list {
		if strings.HasPrefix(b.Secret, secrets.SandboxPrefix) {
			if !sandboxOwn {
				return fmt.Errorf("%w: egress credential %q: %q names a secret given at a sandbox's create; bind a secret of your own", ErrInvalidRequest, b.Label(), b.Secret)
			}
			continue
		}
		need = append(need, b.Secret)
	}
	if len(need) == 0 {
		return nil
	}
	have, err := s.secrets.List(ctx, owner)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, h := range have {
		names[h.Name] = true
	}
	var missing []string
	for _, n := range need {
		if !names[n] {
			missing = append(missing, fmt.Sprintf("%q", n))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: egress credentials name secrets you have not stored: %s (POST /secrets first)", ErrNotFound, strings.Join(missing, ", "))
	}
	return nil
}

// bindingNames lists bindings by name for an event: never a value.
func bindingNames(list []EgressCredential) string {
	if len(list) == 0 {
		return "none"
	}
	names := make([]string, len(list))
	for i, b := range list {
		names[i] = b.Label() + "@" + b.Host
	}
	return strings.Join(names, ",")
}

// loadEgressRoots are the host's authorities and the operator's extra ones
// (SANDBOX_EGRESS_ROOTS), for the servers of credentialed tunnels.
func loadEgressRoots(file string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if file == "" {
		return pool, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("SANDBOX_EGRESS_ROOTS: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("SANDBOX_EGRESS_ROOTS: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// startSessionEgress runs a session's proxy (startEgress) with an
// authority of its own, whose certificate is in a trust store made for
// the sandbox on root's roots: its proxy can open tunnels to add
// credentials. Without a store (a full disk) the proxy runs without one,
// and refuses the tunnels that would need it.
func (s *Service) startSessionEgress(label, root string, refused func(host string)) (*egress.Proxy, *fleet.Forward, string) {
	opts := s.egressOptions(label, refused)
	opts.Operator, opts.OperatorSecrets = s.operatorCreds.Bindings, s.operatorCreds.Secret
	auth, err := egress.NewAuthority(label)
	trust := ""
	if err == nil {
		trust, err = secrets.WriteTrust(filepath.Join(s.cfg.StateDir, "trust"), root, auth.CertificatePEM())
	}
	if err != nil {
		s.log().Warn("egress: no trust store; credentials cannot be added", "session", label, "error", err)
	} else {
		opts.Authority, opts.UpstreamRoots = auth, s.egressRoots
		opts.OnClose = func() { _ = secrets.RemoveTrust(trust) }
		opts.OnCredential = s.credentialUsed(label)
	}
	p := egress.New(s.egress, opts)
	return p, &fleet.Forward{Port: proxyPort, Handle: p.ServeHandedOff(proxyPort)}, trust
}

// startRunEgress is a run's proxy: a session's (startSessionEgress) when
// the operator has credentials for every sandbox, else one that opens no
// tunnel and needs no trust store.
func (s *Service) startRunEgress(label, root string, refused func(host string)) (*egress.Proxy, *fleet.Forward, string) {
	if len(s.operatorCreds.Bindings) > 0 {
		return s.startSessionEgress(label, root, refused)
	}
	p, fwd := s.startEgress(label, refused)
	return p, fwd, ""
}

// credentialUsed audits the first use of each binding by one proxy
// (every request would flood the log): its name and host.
func (s *Service) credentialUsed(label string) func(egress.CredentialUse) {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(u egress.CredentialUse) {
		mu.Lock()
		first := !seen[u.Name+"\x00"+u.Host] && len(seen) < egress.MaxBindings*4
		seen[u.Name+"\x00"+u.Host] = true
		mu.Unlock()
		if first {
			s.emit(context.Background(), Event{Kind: EventSecret, Action: "egress_credential", Outcome: "success",
				Detail: fmt.Sprintf("%s: %s added for %s %s", label, u.Name, u.Method, u.Host)})
		}
	}
}

// sandboxSecrets tracks the sessions given secrets of their own here (E2B's
// rules), to forget those when the session ends.
type sandboxSecrets struct {
	mu  sync.Mutex
	ids map[string]string // session id -> owner
}

func (t *sandboxSecrets) track(id, owner string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ids == nil {
		t.ids = map[string]string{}
	}
	t.ids[id] = owner
}

// SetSandboxCredentials binds values a sandbox's creator gave inline (E2B's
// network rules: host -> headers) to session id, replacing those it had:
// they are kept sealed as the sandbox's own, never its owner's, so its
// copies have none. The session may be on another replica (the vault is
// shared where replicas are).
func (s *Service) SetSandboxCredentials(ctx context.Context, id, owner string, rules []InlineCredential) error {
	if err := CheckInlineCredentials(rules); err != nil {
		return err
	}
	if _, err := s.GetSession(ctx, id, owner); err != nil {
		return err
	}
	if len(rules) == 0 {
		if _, err := s.setCredentials(ctx, id, owner, nil, true); err != nil {
			return err
		}
		s.secrets.PruneSandbox(ctx, owner, id, 0)
		return nil
	}
	values := make([]string, len(rules))
	list := make([]EgressCredential, len(rules))
	for i, r := range rules {
		values[i] = r.Value
		list[i] = r.Binding
	}
	names, err := s.secrets.PutSandbox(ctx, owner, id, values)
	if err != nil {
		return err
	}
	for i := range list {
		list[i].Secret = names[i]
	}
	s.sandboxSecrets.track(id, owner)
	if _, err := s.setCredentials(ctx, id, owner, list, true); err != nil {
		s.secrets.PruneSandbox(ctx, owner, id, 0)
		return err
	}
	s.secrets.PruneSandbox(ctx, owner, id, len(values)) // an earlier update's others
	return nil
}

// CheckInlineCredentials refuses inline bindings that do not parse, or
// whose values could not go into a header, before a sandbox is made.
func CheckInlineCredentials(list []InlineCredential) error {
	if len(list) == 0 {
		return nil
	}
	bindings := make([]EgressCredential, len(list))
	for i, c := range list {
		bindings[i] = c.Binding
		if !validHeaderValue(c.Value) {
			return fmt.Errorf("%w: egress credential %q: its value goes into a header: 1 to 8192 bytes, no line breaks or control characters", ErrInvalidRequest, c.Binding.Label())
		}
	}
	return checkBindings(withSecrets(bindings), true)
}

// InlineCredential is a binding with its value given, not stored.
type InlineCredential struct {
	egress.Binding
	Value string
}

// withSecrets gives bindings whose secret is still to be named one, for
// checking.
func withSecrets(list []EgressCredential) []EgressCredential {
	out := make([]EgressCredential, len(list))
	for i, b := range list {
		b.Secret = secrets.SandboxPrefix + "0"
		out[i] = b
	}
	return out
}

// dropSandboxSecrets forgets the secrets of session id, closed.
func (s *Service) dropSandboxSecrets(ctx context.Context, id string) {
	s.sandboxSecrets.mu.Lock()
	owner, ok := s.sandboxSecrets.ids[id]
	delete(s.sandboxSecrets.ids, id)
	s.sandboxSecrets.mu.Unlock()
	if ok {
		s.secrets.DropSandbox(context.WithoutCancel(ctx), owner, id)
	}
}

// sweepSecrets runs sweepSandboxSecrets every interval until Close.
func (s *Service) sweepSecrets(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweepSandboxSecrets(context.Background())
		}
	}
}

// sweepSandboxSecrets forgets the secrets of sessions that ended (closed,
// expired), neither live nor parked.
func (s *Service) sweepSandboxSecrets(ctx context.Context) {
	s.sandboxSecrets.mu.Lock()
	ids := make(map[string]string, len(s.sandboxSecrets.ids))
	for id, owner := range s.sandboxSecrets.ids {
		ids[id] = owner
	}
	s.sandboxSecrets.mu.Unlock()
	for id, owner := range ids {
		// Live here or on a peer, or parked: kept.
		if _, err := s.GetSession(ctx, id, owner); !errors.Is(err, ErrSessionNotFound) {
			continue
		}
		s.secrets.DropSandbox(ctx, owner, id)
		s.sandboxSecrets.mu.Lock()
		delete(s.sandboxSecrets.ids, id)
		s.sandboxSecrets.mu.Unlock()
	}
}

// validHeaderValue: a value fit to go whole into a header.
func validHeaderValue(v string) bool {
	return v != "" && len(v) <= 8<<10 && httpguts.ValidHeaderFieldValue(v) && !strings.ContainsAny(v, "\r\n")
}
