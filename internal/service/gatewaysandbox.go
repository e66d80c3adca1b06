package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/service/commands"
	"github.com/codecage/codecage/internal/upstream"
)

// A gateway server the operator allows but does not vouch for (a catalog
// server: ServerConfig.Sandbox) runs in a sandbox of its own: a machine
// session of the server's, with the network its entry names alone and
// its secrets in its process's environment, which is not the code's
// sandbox. Its stdin and stdout are the MCP stream.

// gatewaySandbox starts gateway id's sandboxed servers (owner's).
func (s *Service) gatewaySandbox(id, owner string) upstream.Launcher {
	return func(ctx context.Context, name string, cfg upstream.ServerConfig, log *slog.Logger) (upstream.Stdio, error) {
		return s.startSandboxedServer(ctx, id, owner, name, cfg, log)
	}
}

// serverOwner owns the session of gateway id's server name: apart from
// the sandbox's owner, who neither lists it nor reaches it.
func serverOwner(owner, id, name string) string {
	h := sha256.Sum256([]byte(owner + "\x00" + id + "\x00" + name))
	return "gateway-server:" + hex.EncodeToString(h[:12])
}

func (s *Service) startSandboxedServer(ctx context.Context, id, owner, name string, cfg upstream.ServerConfig, log *slog.Logger) (upstream.Stdio, error) {
	if !s.OffersMachines(false) {
		return nil, errors.New("a sandboxed server runs in a machine session, which this server does not offer (SANDBOX_MACHINE_SESSIONS)")
	}
	req := SessionRequest{Owner: serverOwner(owner, id, name), Machine: true, Lifetime: s.cfg.SessionMaxLifetime,
		Environment: cfg.Sandbox.Environment, Labels: map[string]string{"gateway": id, "server": name}}
	if allow := cfg.Sandbox.NetworkAllow; len(allow) > 0 {
		req.Profiles = []string{"network"}
		req.Network = &NetworkRules{AllowOut: allow, DenyOut: egress.DenyAll().DenyOut}
	}
	se, err := s.CreateSession(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("its sandbox: %w", err)
	}
	p := &sandboxedServer{s: s, id: se.ID, owner: req.Owner, started: make(chan struct{}), done: make(chan struct{})}
	p.stdout, p.out = io.Pipe()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	go p.run(runCtx, append([]string{cfg.Command}, cfg.Args...), cfg.Env, log)
	select {
	case <-p.started:
		return p, nil
	case <-p.done:
		p.Stop(false)
		return nil, fmt.Errorf("it did not start: %s", p.ExitDescription())
	case <-ctx.Done():
		p.Stop(false)
		return nil, ctx.Err()
	}
}

// sandboxedServer is a stdio server running as a command of its session.
type sandboxedServer struct {
	s         *Service
	id, owner string
	cancel    context.CancelFunc
	stdout    *io.PipeReader
	out       *io.PipeWriter
	started   chan struct{} // its input is open
	done      chan struct{} // its command ended

	mu     sync.Mutex
	in     *commands.CommandInput
	ended  string
	tail   []string
	closed bool
}

func (p *sandboxedServer) run(ctx context.Context, argv []string, env map[string]string, log *slog.Logger) {
	defer close(p.done)
	res, err := p.s.RunCommand(ctx, CommandRequest{SessionID: p.id, Owner: p.owner, Argv: argv, Env: env,
		Stdin: true, Streamed: true, Timeout: p.s.cfg.SessionMaxLifetime, TimeoutCeiling: true,
		OnInput: func(in *commands.CommandInput) {
			p.mu.Lock()
			p.in = in
			p.mu.Unlock()
		},
		OnStart: func() { close(p.started) },
		OnOutput: func(stream, text string) {
			if stream == "stdout" {
				_, _ = p.out.Write([]byte(text))
				return
			}
			p.mu.Lock()
			// Its stderr goes to the log alone, capped: it may quote
			// its secrets.
			for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
				p.tail = append(p.tail, l[:min(len(l), 200)])
			}
			if len(p.tail) > 5 {
				p.tail = p.tail[len(p.tail)-5:]
			}
			p.mu.Unlock()
		},
	})
	p.mu.Lock()
	switch {
	case err != nil:
		p.ended = "failed: " + err.Error()
	default:
		p.ended = fmt.Sprintf("exited with status %d", res.ExitCode)
	}
	p.mu.Unlock()
	p.out.CloseWithError(io.EOF)
	log.Info("upstream: its sandbox's command ended", "how", p.ExitDescription())
}

func (p *sandboxedServer) Stdout() io.ReadCloser { return p.stdout }
func (p *sandboxedServer) Stdin() io.WriteCloser { return serverInput{p} }

// Stop ends the server and its sandbox; graceful closes its input and
// gives it a moment first.
func (p *sandboxedServer) Stop(graceful bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	in := p.in
	p.mu.Unlock()
	if graceful && in != nil {
		_ = in.Close()
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
		}
	}
	p.cancel()
	_ = p.s.CloseSession(context.Background(), p.id, p.owner)
	<-p.done
}

func (p *sandboxedServer) ExitDescription() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

func (p *sandboxedServer) StderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, " | ")
}

// serverInput writes to the server's stdin in pieces the command takes.
type serverInput struct{ p *sandboxedServer }

func (w serverInput) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	in := w.p.in
	w.p.mu.Unlock()
	if in == nil {
		return 0, errors.New("the server's input is not open")
	}
	for off := 0; off < len(b); off += commands.MaxInputChunk {
		if err := in.Write(b[off:min(len(b), off+commands.MaxInputChunk)]); err != nil {
			return off, err
		}
	}
	return len(b), nil
}

func (w serverInput) Close() error {
	w.p.mu.Lock()
	in := w.p.in
	w.p.mu.Unlock()
	if in == nil {
		return nil
	}
	return in.Close()
}
