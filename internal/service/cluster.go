package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/fleet"
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

// ErrSessionLost: the session's replica is gone (stopped, deleted,
// crashed), and its interpreter and workspace with it.
var ErrSessionLost = errors.New("session lost with its replica")

// KindSessionLost is ErrSessionLost's kind.
const KindSessionLost = "session_lost"

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

// Peer call operations.
const (
	OpExecute    = "execute"
	OpCommand    = "command"
	OpInstall    = "install"
	OpGet        = "get"
	OpList       = "list"
	OpRestart    = "restart"
	OpClose      = "close"
	OpWriteFile  = "write_file"
	OpReadFile   = "read_file"
	OpListFiles  = "list_files"
	OpDeleteFile = "delete_file"
	OpStatFile   = "stat_file"
	OpMakeDir    = "make_dir"
	OpMoveFile   = "move_file"
	OpLifetime   = "lifetime"
	// OpReadRange reads a chunk of a file from Offset (a download).
	OpReadRange = "read_range"
	OpPause     = "pause"
	OpResume    = "resume"
	OpSnapshot  = "snapshot"
	OpFork      = "fork"
	OpMetrics   = "metrics"
)

// PeerCall is a session request one replica forwards to the replica that
// holds the session, with the caller it came from.
type PeerCall struct {
	Op         string          `json:"op"`
	Key        string          `json:"key,omitempty"`
	Surface    string          `json:"surface,omitempty"`
	RemoteAddr string          `json:"remote_addr,omitempty"`
	Owner      string          `json:"owner"`
	SessionID  string          `json:"session_id,omitempty"`
	Execute    *Request        `json:"execute,omitempty"`
	Command    *CommandRequest `json:"command,omitempty"`
	Install    *InstallRequest `json:"install,omitempty"`
	Path       string          `json:"path,omitempty"`
	// Depth bounds OpListFiles (0: the whole tree).
	Depth int `json:"depth,omitempty"`
	// To is where OpMoveFile moves Path.
	To string `json:"to,omitempty"`
	// Lifetime is OpLifetime's new lifetime, from now.
	Lifetime time.Duration `json:"lifetime,omitempty"`
	Data     []byte        `json:"data,omitempty"`
	// Metadata is OpWriteFile's metadata for the file (its first chunk).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Offset is where OpReadRange reads from; Classify asks it whether
	// the file is text.
	Offset   int64 `json:"offset,omitempty"`
	Classify bool  `json:"classify,omitempty"`
	// Append: OpWriteFile adds Data to the end of the file (a chunk of an
	// upload) instead of replacing it.
	Append bool `json:"append,omitempty"`
	// EmptyDir: OpDeleteFile removes Path only if it is an empty
	// directory (a failed upload's clean-up).
	EmptyDir bool `json:"empty_dir,omitempty"`
	// Stream asks for output lines as they come.
	Stream bool `json:"stream,omitempty"`
	// KeepMemory and Park are OpPause's; Name names OpSnapshot's snapshot; Count is
	// how many copies OpFork makes.
	KeepMemory bool   `json:"keep_memory,omitempty"`
	Park       bool   `json:"park,omitempty"`
	Name       string `json:"name,omitempty"`
	Count      int    `json:"count,omitempty"`
	// Adopt: the session's own replica is gone, and the replica this call
	// goes to took it over (Cluster.Claim).
	Adopt bool `json:"adopt,omitempty"`
}

// PeerError is how a forwarded request's failure travels back: its kind
// and message, rebuilt on the way back into an error every surface
// classifies as if it had happened here.
type PeerError struct {
	Kind       string  `json:"kind"`
	Message    string  `json:"message"`
	RetryAfter float64 `json:"retry_after,omitempty"`
}

// Error is the owner's message.
func (pe *PeerError) Error() string { return pe.Message }

// PeerErrorOf describes err for the replica that forwarded the request.
func PeerErrorOf(err error) *PeerError {
	pe := &PeerError{Kind: ErrorKind(err), Message: err.Error()}
	if errors.Is(err, ErrSessionLost) {
		pe.Kind = KindSessionLost
	}
	if d := access.RetryAfter(err); d > 0 {
		pe.RetryAfter = d.Seconds()
	}
	return pe
}

// Err rebuilds the error: the owner's message, classified by its kind
// (KindError), with the two differences a forwarded failure has.
func (pe *PeerError) Err() error {
	base := KindError(pe.Kind)
	switch pe.Kind {
	case KindRateLimited:
		base = &access.DeniedError{Err: access.ErrRateLimited, Msg: pe.Message, RetryAfter: time.Duration(pe.RetryAfter * float64(time.Second))}
	case KindShuttingDown:
		// The owner is stopping: its sessions go with it.
		base = ErrSessionLost
	}
	return &remoteError{msg: pe.Message, err: base}
}

// remoteError is a failure the owner reported (and audited): its message
// as the owner wrote it, its kind through Unwrap.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

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

// forward carries call to replica and decodes its answer into a T. A
// failure of the forwarding itself (the replica gone or silent) is audited
// here; one the owner reports, the owner audited.
func forward[T any](ctx context.Context, s *Service, replica string, call PeerCall, onOutput func(stream, line string), kind, action string) (T, error) {
	var out T
	start := time.Now()
	c, _ := CallerFrom(ctx)
	call.Key, call.Surface, call.RemoteAddr = c.Key, c.Surface, c.RemoteAddr
	call.Stream = onOutput != nil
	ctx, cancel := context.WithTimeout(ctx, s.forwardDeadline(call))
	defer cancel()
	raw, err := s.cluster.Call(ctx, replica, call, onOutput)
	if err == nil {
		if err = json.Unmarshal(raw, &out); err != nil {
			err = fmt.Errorf("%w: the answer of replica %s: %v", ErrUnavailable, replica, err)
		}
	}
	if err != nil {
		var re *remoteError
		if !errors.As(err, &re) {
			s.emitFailure(ctx, kind, action, "", "", err, start)
		}
		return out, err
	}
	return out, nil
}

// forwardDeadline bounds a forwarded call: the longest the owner may take
// to queue and run it, and a margin. An owner that does not answer by then
// is reported as unavailable; the caller never waits forever.
func (s *Service) forwardDeadline(call PeerCall) time.Duration {
	var run time.Duration
	if o := ops[call.Op]; o.run != nil {
		run = o.run(s, call)
	}
	return s.cfg.QueueTimeout + run + 30*time.Second
}

// ServePeer runs a call another replica forwarded, as if its caller had
// sent it here, and returns the answer to send back. Only sessions of
// this replica are served: a forwarded call is never forwarded again.
func (s *Service) ServePeer(ctx context.Context, call PeerCall, onOutput func(stream, line string)) (any, error) {
	if s.cluster == nil {
		return nil, fmt.Errorf("%w: this server is not a replica of a cluster", ErrInvalidRequest)
	}
	id := call.Session()
	mine := strings.HasSuffix(id, "-"+s.cluster.Self()) && s.remote(id) == ""
	if call.Op != OpList && (id == "" || !mine && !call.Adopt && !s.sessions.Has(id)) {
		return nil, fmt.Errorf("%w: %s is not a session of replica %s", ErrSessionNotFound, Quote(id), s.cluster.Self())
	}
	ctx = WithCaller(ctx, Caller{Key: call.Key, Surface: call.Surface, RemoteAddr: call.RemoteAddr})
	if !call.Stream {
		onOutput = nil
	}
	o := ops[call.Op]
	if o.serve == nil {
		return nil, errUnknownOp(call.Op)
	}
	call.SessionID = id
	return o.serve(ctx, s, call, onOutput)
}

// Session is the session a peer call is about: the one of its request,
// for the operations that carry one.
func (call PeerCall) Session() string {
	switch {
	case call.Execute != nil:
		return call.Execute.SessionID
	case call.Command != nil:
		return call.Command.SessionID
	case call.Install != nil:
		return call.Install.SessionID
	}
	return call.SessionID
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
			raw, err := s.cluster.Call(ctx, r, PeerCall{Op: OpList, Owner: owner}, nil)
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
