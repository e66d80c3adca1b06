package service

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// A session lives in the process that created it: its interpreter is a
// child of that replica. When several replicas serve one deployment, any
// of them may receive a request for any session, so the service forwards
// the request to the replica that holds the session, and every surface
// (REST, MCP, the file API) gets that for free.
//
// The owner is written in the session id itself ("s<random>-<replica>"):
// finding it costs no lookup in a shared catalog, and a forged id can name
// only a replica the cluster already knows, never a host.

// Cluster is how a replica reaches the others. The service calls it only
// for sessions whose id names another replica.
type Cluster interface {
	// Self is this replica's id, the suffix of the session ids it makes.
	Self() string
	// Call carries call to the replica and returns its JSON answer;
	// output lines stream to onOutput when it is not nil. It fails with
	// ErrSessionLost when the replica is gone, ErrSessionNotFound when no
	// such replica ever was, ErrUnavailable when it does not answer.
	Call(ctx context.Context, replica string, call PeerCall, onOutput func(stream, line string)) (json.RawMessage, error)
	// Peers lists the other replicas alive now.
	Peers(ctx context.Context) []string
	// Claim returns the replica that takes over session, whose replica
	// is gone (it parked the session in the shared store as it stopped):
	// one that claimed it already and is alive, else this one, which now
	// holds the claim. Release drops this replica's claim.
	Claim(ctx context.Context, session string) (string, error)
	Release(ctx context.Context, session string)
}

// PeerCall is a session request one replica forwards to the replica that
// holds the session: the envelope (the operation, its caller and
// session) and the operation's own arguments, which its row in ops types
// (peerrow.go). A replica of the release before this one sends and reads
// another shape (peerv1.go).
type PeerCall struct {
	Op         string `json:"op"`
	Key        string `json:"key,omitempty"`
	Surface    string `json:"surface,omitempty"`
	RemoteAddr string `json:"remote_addr,omitempty"`
	Owner      string `json:"owner"`
	SessionID  string `json:"session_id,omitempty"`
	// Stream asks for output lines as they come.
	Stream bool `json:"stream,omitempty"`
	// Adopt: the session's own replica is gone, and the replica this call
	// goes to took it over (Cluster.Claim).
	Adopt bool `json:"adopt,omitempty"`
	// Args are the operation's arguments, as its row encodes them ({}
	// when it has none).
	Args json.RawMessage `json:"args,omitempty"`
}

// PeerError is how a forwarded request's failure travels back
// (errdefs.PeerError).
type PeerError = errdefs.PeerError

// PeerErrorOf describes err for the replica that forwarded the request.
func PeerErrorOf(err error) *PeerError { return errdefs.PeerErrorOf(err) }

// newSessionID makes a session id naming this replica.
func (s *Service) newSessionID() string {
	id := "s" + fleet.NewID()
	if s.cluster != nil {
		id += "-" + s.cluster.Self()
	}
	return id
}

// remote returns the replica holding session id when it is another one,
// else "".
func (s *Service) remote(id string) string {
	if s.cluster == nil || id == "" {
		return ""
	}
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return ""
	}
	if r := id[i+1:]; r != s.cluster.Self() {
		return r
	}
	return ""
}

// forward carries call, with its operation's arguments args, to replica
// and decodes its answer into a T. A failure of the forwarding itself
// (the replica gone or silent) is audited here; one the owner reports,
// the owner audited.
func forward[T any](ctx context.Context, s *Service, replica string, call PeerCall, args any, onOutput func(stream, line string), kind, action string) (T, error) {
	var out T
	start := time.Now()
	c, _ := CallerFrom(ctx)
	call.Key, call.Surface, call.RemoteAddr = c.Key, c.Surface, c.RemoteAddr
	call.Stream = onOutput != nil
	raw, run, err := encodeArgs(s, call.Op, args)
	if err == nil {
		call.Args = raw
		ctx, cancel := context.WithTimeout(ctx, s.forwardDeadline(run))
		defer cancel()
		raw, err = s.cluster.Call(ctx, replica, call, onOutput)
		if err == nil {
			if err = json.Unmarshal(raw, &out); err != nil {
				err = fmt.Errorf("%w: the answer of replica %s: %v", ErrUnavailable, replica, err)
			}
		}
	}
	if err != nil {
		if !errdefs.IsRemote(err) {
			s.emitFailure(ctx, kind, action, "", "", err, start)
		}
		return out, err
	}
	return out, nil
}

// encodeArgs encodes the arguments of operation name, and says how long
// the owner may take to run them, as its row's peer does. An operation
// without one travels anyway, for the owner to refuse.
func encodeArgs(s *Service, name string, args any) (json.RawMessage, time.Duration, error) {
	if p := ops[name].peer; p != nil {
		return p.encode(s, args)
	}
	if args == nil {
		args = noArgs{}
	}
	raw, err := json.Marshal(args)
	return raw, 0, err
}

// forwardDeadline bounds a forwarded call: the longest the owner may take
// to queue it, run (its row's run), and a margin. An owner that does not
// answer by then is reported as unavailable; the caller never waits
// forever.
func (s *Service) forwardDeadline(run time.Duration) time.Duration {
	return s.cfg.QueueTimeout + run + 30*time.Second
}

// ServePeer runs a call another replica forwarded, as if its caller had
// sent it here, and returns the answer to send back. Only sessions of
// this replica are served: a forwarded call is never forwarded again.
func (s *Service) ServePeer(ctx context.Context, call PeerCall, onOutput func(stream, line string)) (any, error) {
	if s.cluster == nil {
		return nil, fmt.Errorf("%w: this server is not a replica of a cluster", ErrInvalidRequest)
	}
	id := call.SessionID
	mine := strings.HasSuffix(id, "-"+s.cluster.Self()) && s.remote(id) == ""
	if call.Op != opList && (id == "" || !mine && !call.Adopt && !s.sessions.Has(id)) {
		return nil, fmt.Errorf("%w: %s is not a session of replica %s", ErrSessionNotFound, Quote(id), s.cluster.Self())
	}
	ctx = WithCaller(ctx, Caller{Key: call.Key, Surface: call.Surface, RemoteAddr: call.RemoteAddr})
	if !call.Stream {
		onOutput = nil
	}
	p := ops[call.Op].peer
	if p == nil {
		return nil, errUnknownOp(call.Op)
	}
	return p.serve(ctx, s, call, onOutput)
}

// peerListWait bounds how long listing sessions waits for the other
// replicas: one that does not answer in time is left out, as a lost one is.
const peerListWait = 3 * time.Second

// ListSessions lists the owner's sessions on every replica.
func (s *Service) ListSessions(ctx context.Context, owner string) []SessionInfo {
	out := s.localSessions(owner)
	out = append(out, s.parkedSessions(ctx, owner)...)
	if s.cluster == nil {
		sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, peerListWait)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range s.cluster.Peers(ctx) {
		wg.Go(func() {
			raw, err := s.cluster.Call(ctx, r, PeerCall{Op: opList, Owner: owner, Args: json.RawMessage("{}")}, nil)
			var list []SessionInfo
			if err == nil {
				err = json.Unmarshal(raw, &list)
			}
			if err != nil {
				s.log().Warn("listing sessions: a replica did not answer; its sessions are left out", "replica", r, "err", err)
				return
			}
			mu.Lock()
			out = append(out, list...)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}
