package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/streamwrite"
)

// The peer protocol: one POST to PeerPath per forwarded request. The
// request names the replica it is for and is signed with the shared
// secret (HMAC-SHA256 of the target id and the body), so the secret itself
// never travels. The answer is newline-delimited JSON frames: output lines
// while the call runs, then its result or its error.
const (
	// PeerPath is where a replica takes calls from the others.
	PeerPath = "/internal/peer"

	headerTarget    = "X-Codecage-Replica"
	headerFrom      = "X-Codecage-From"
	headerSignature = "X-Codecage-Signature"
	// headerProtocol, on an answer, says the replica reads calls of the
	// typed shape (v2). Until a replica has said so, it is sent the
	// shape of the release before (service.PeerCall.V1JSON), which both
	// read: a rolling upgrade keeps answering both ways (the next
	// release sends v2 to all; see internal/service/peerv1.go).
	headerProtocol = "X-Codecage-Peer-Protocol"
	protocolV2     = "2"
)

// frame is one line of a peer answer.
type frame struct {
	Stream string             `json:"stream,omitempty"`
	Line   string             `json:"line,omitempty"`
	Result json.RawMessage    `json:"result,omitempty"`
	Error  *service.PeerError `json:"error,omitempty"`
}

func sign(secret []byte, target string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(target))
	m.Write([]byte{'\n'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Call carries call to the replica id (service.Cluster).
func (n *Node) Call(ctx context.Context, id string, call service.PeerCall, onOutput func(stream, line string)) (json.RawMessage, error) {
	session := call.SessionID
	r, ok, err := n.reg.lookup(ctx, id, false)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: cannot find replica %s holding session %s: %v", service.ErrUnavailable, id, session, err)
	case !ok:
		return nil, fmt.Errorf("%w: %q (no replica %s in this cluster)", service.ErrSessionNotFound, session, id)
	case r.Stopped:
		return nil, lost(session, r)
	}
	raw, err := n.send(ctx, r, call, onOutput)
	var pe *service.PeerError
	switch {
	case err == nil:
		return raw, nil
	case errors.As(err, &pe):
		return nil, pe.Err()
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled):
		return nil, ctx.Err()
	}
	// No answer: is the replica gone, or only slow?
	if fresh, ok, lerr := n.reg.lookup(context.WithoutCancel(ctx), id, true); lerr == nil && ok && !fresh.alive() {
		return nil, lost(session, fresh)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w: replica %s (%s) holding session %s did not answer in time", service.ErrUnavailable, r.Name, r.ID, session)
	}
	return nil, fmt.Errorf("%w: replica %s (%s) holding session %s does not answer: %v", service.ErrUnavailable, r.Name, r.ID, session, err)
}

func lost(session string, r replica) error {
	how := fmt.Sprintf("stopped %s ago", r.Since.Round(time.Second))
	if !r.Stopped {
		how = fmt.Sprintf("has not been heard from for %s", r.Since.Round(time.Second))
	}
	return fmt.Errorf("%w: session %s was held by replica %s (%s), which %s; create a new session", service.ErrSessionLost, session, r.Name, r.ID, how)
}

// send makes the HTTP exchange. A *service.PeerError is the owner's
// answer; any other error means there was no answer.
func (n *Node) send(ctx context.Context, r replica, call service.PeerCall, onOutput func(stream, line string)) (json.RawMessage, error) {
	body, err := n.encode(r.ID, call)
	if err != nil {
		return nil, &service.PeerError{Kind: service.KindInvalidRequest, Message: "cannot forward the request: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL+PeerPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerTarget, r.ID)
	req.Header.Set(headerFrom, n.id)
	req.Header.Set(headerSignature, sign(n.secret, r.ID, body))
	resp, err := n.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.Header.Get(headerProtocol) == protocolV2 {
		n.v2.Store(r.ID, true)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	if resp.StatusCode != http.StatusOK {
		var f frame
		if json.NewDecoder(io.LimitReader(br, 64<<10)).Decode(&f) == nil && f.Error != nil {
			return nil, f.Error
		}
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var f frame
			if jerr := json.Unmarshal(line, &f); jerr != nil {
				return nil, fmt.Errorf("a malformed answer: %v", jerr)
			}
			switch {
			case f.Error != nil:
				return nil, f.Error
			case f.Result != nil:
				return f.Result, nil
			case onOutput != nil && f.Stream != "":
				onOutput(f.Stream, f.Line)
			}
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the owner went away mid-answer
			}
			return nil, err
		}
	}
}

// encode is call's body for replica id: typed when id reads it, else v1.
func (n *Node) encode(id string, call service.PeerCall) ([]byte, error) {
	if _, ok := n.v2.Load(id); ok {
		return json.Marshal(call)
	}
	return call.V1JSON()
}

// Server is what the peer handler asks of the service (a
// *service.Service): to serve a call another replica forwarded.
type Server interface {
	ServePeer(ctx context.Context, call service.PeerCall, onOutput func(stream, line string)) (any, error)
}

// Handler serves the calls other replicas forward to this one.
// maxBody bounds a call (a file written through the file API travels in
// it, base64-encoded); writeTimeout bounds each write of the answer
// (SANDBOX_STREAM_WRITE_TIMEOUT).
func (n *Node) Handler(svc Server, maxBody int64, writeTimeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(headerProtocol, protocolV2)
		refuse := func(status int, kind, msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(frame{Error: &service.PeerError{Kind: kind, Message: msg}})
		}
		if r.Method != http.MethodPost {
			refuse(http.StatusMethodNotAllowed, service.KindInvalidRequest, "POST only")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			refuse(http.StatusRequestEntityTooLarge, service.KindTooLarge, "the forwarded request is too large")
			return
		}
		target := r.Header.Get(headerTarget)
		if !hmac.Equal([]byte(r.Header.Get(headerSignature)), []byte(sign(n.secret, target, body))) {
			refuse(http.StatusUnauthorized, "unauthorized", "not signed with this cluster's SANDBOX_PEER_SECRET")
			return
		}
		if target != n.id {
			// Another process now has the address the registry gave: the
			// one asked for is gone, and its sessions with it.
			refuse(http.StatusMisdirectedRequest, service.KindSessionLost,
				fmt.Sprintf("session lost with its replica: replica %s is gone (this address now serves replica %s); create a new session", target, n.id))
			return
		}
		var call service.PeerCall // either shape (service.PeerCall.UnmarshalJSON)
		if err := json.Unmarshal(body, &call); err != nil {
			refuse(http.StatusBadRequest, service.KindInvalidRequest, "malformed peer call: "+err.Error())
			return
		}
		// The answer starts at once (so the caller's header timeout never
		// counts the run), and lasts as long as the run; each write is
		// bounded, so a replica that stops reading is dropped.
		w = streamwrite.Wrap(w, writeTimeout)
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		var mu sync.Mutex
		enc := json.NewEncoder(w)
		write := func(f frame) {
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(f)
			_ = rc.Flush()
		}
		var onOutput func(stream, line string)
		if call.Stream {
			onOutput = func(stream, line string) { write(frame{Stream: stream, Line: line}) }
		}
		res, err := svc.ServePeer(r.Context(), call, onOutput)
		if err == nil {
			var raw []byte
			if raw, err = json.Marshal(res); err == nil {
				write(frame{Result: raw})
				return
			}
		}
		write(frame{Error: service.PeerErrorOf(err)})
	})
}
