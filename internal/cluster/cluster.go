// Package cluster lets several codecage replicas serve as one: each
// registers itself in the deployment's shared PostgreSQL, and a request
// for a session held by another replica is carried to it over HTTP,
// authenticated by a secret the replicas share.
//
// It implements service.Cluster, the one seam through which the service
// reaches other replicas; it knows the service's requests but nothing of
// REST or MCP. Why the owner is written in the session id rather than kept
// in a catalog: see internal/sandbox/cluster.go.
package cluster

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// Config describes this replica.
type Config struct {
	// Name is for people: a pod name or a host name.
	Name string
	// URL is where the other replicas reach this one (http://ip:port).
	URL string
	// Secret authenticates replicas to each other; at least 16 bytes.
	Secret string
	// DB is the shared PostgreSQL that holds the replica registry.
	DB *sql.DB
	// Log receives the registry's troubles.
	Log *slog.Logger
	// Heartbeat is how often the replica says it is alive (default 2 s);
	// one silent for 5 heartbeats is gone.
	Heartbeat time.Duration
}

// MinSecret is the shortest shared secret accepted.
const MinSecret = 16

// Node is this replica's membership of the cluster.
type Node struct {
	id, name, url string
	secret        []byte
	reg           *registry
	log           *slog.Logger
	client        *http.Client
	beat          time.Duration
	// v2 holds the ids of the replicas that answered as readers of the
	// typed peer call (service.PeerCall.Args); the others are sent v1.
	v2 sync.Map

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

var _ service.Cluster = (*Node)(nil)

// Join registers this replica and starts its heartbeat.
func Join(ctx context.Context, cfg Config) (*Node, error) {
	if len(cfg.Secret) < MinSecret {
		return nil, fmt.Errorf("SANDBOX_PEER_SECRET must be at least %d characters: replicas authenticate each other with it", MinSecret)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, fmt.Errorf("SANDBOX_REPLICA_URL %q: want the base URL other replicas reach this one at, e.g. http://10.0.0.7:8001", cfg.URL)
	}
	if cfg.DB == nil {
		return nil, errors.New("a cluster needs the shared PostgreSQL: set SANDBOX_AUDIT_DB to a postgres:// URL")
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		id: newReplicaID(), name: cfg.Name, url: u.Scheme + "://" + u.Host, secret: []byte(cfg.Secret),
		reg:  &registry{db: cfg.DB, stale: 5 * cfg.Heartbeat},
		log:  cfg.Log,
		beat: cfg.Heartbeat,
		client: &http.Client{Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ResponseHeaderTimeout: 10 * time.Second, // the owner answers headers before it runs anything
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       90 * time.Second,
		}},
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if err := n.reg.migrate(ctx); err != nil {
		return nil, fmt.Errorf("replica registry: %w", err)
	}
	if err := n.reg.join(ctx, n.id, n.name, n.url); err != nil {
		return nil, fmt.Errorf("replica registry: %w", err)
	}
	if err := n.reg.refresh(ctx); err != nil {
		return nil, fmt.Errorf("replica registry: %w", err)
	}
	go n.heartbeat()
	return n, nil
}

// newReplicaID names one process: "r" and 8 hex digits, short because
// it ends every session id this replica makes.
func newReplicaID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "r" + hex.EncodeToString(b[:])
}

// Self is this replica's id.
func (n *Node) Self() string { return n.id }

// Name is this replica's name.
func (n *Node) Name() string { return n.name }

// heartbeat refreshes this replica's row and the copy of the others'.
func (n *Node) heartbeat() {
	defer close(n.done)
	t := time.NewTicker(n.beat)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.beat)
		err := n.reg.heartbeat(ctx, n.id)
		if err == nil {
			err = n.reg.refresh(ctx)
		}
		cancel()
		switch {
		case err != nil && !failing:
			n.log.Error("replica registry: heartbeat failed; forwarding goes on with the last known replicas", "err", err)
			failing = true
		case err == nil && failing:
			n.log.Info("replica registry: heartbeat restored")
			failing = false
		}
	}
}

// Leave marks this replica stopped, so that requests for its sessions
// arriving elsewhere are answered "session lost" at once, and stops the
// heartbeat. Requests already forwarded here are still served while the
// server drains.
func (n *Node) Leave(ctx context.Context) error {
	n.stopOnce.Do(func() { close(n.stop) })
	<-n.done
	return n.reg.leave(ctx, n.id)
}

// Peers lists the other replicas alive now: as the registry says, or, when
// it cannot be read, as of the last heartbeat.
func (n *Node) Peers(ctx context.Context) []string {
	if err := n.reg.refresh(ctx); err != nil {
		n.log.Warn("replica registry: listing the replicas from the last heartbeat's copy", "err", err)
	}
	var out []string
	for _, r := range n.reg.alive() {
		if r.ID != n.id {
			out = append(out, r.ID)
		}
	}
	return out
}
