package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/cluster"
	"github.com/codecage/codecage/internal/config"
)

// checkClusterConfig refuses a cluster setting that cannot work, before
// anything starts.
func checkClusterConfig(cfg config.Config) error {
	switch {
	case cfg.ReplicaURL == "" && cfg.PeerSecret != "":
		return errors.New("SANDBOX_PEER_SECRET is set but SANDBOX_REPLICA_URL is not: set both to run as one replica of several")
	case cfg.ReplicaURL == "":
		return nil
	case !audit.IsPostgres(cfg.AuditDB):
		return errors.New("SANDBOX_REPLICA_URL needs a shared PostgreSQL: set SANDBOX_AUDIT_DB to a postgres:// URL (the replicas register there)")
	case len(cfg.PeerSecret) < cluster.MinSecret:
		return fmt.Errorf("SANDBOX_REPLICA_URL needs SANDBOX_PEER_SECRET, a secret of at least %d characters the replicas share", cluster.MinSecret)
	}
	return nil
}

// joinCluster joins the replicas registered in the shared PostgreSQL when
// SANDBOX_REPLICA_URL is set; nil when this server is a single one.
func joinCluster(cfg config.Config, store auditStore, log *slog.Logger) (*cluster.Node, error) {
	pg, ok := store.(*audit.Postgres)
	if cfg.ReplicaURL == "" || !ok {
		return nil, nil // checkClusterConfig refused a replica URL without PostgreSQL
	}
	name := cfg.ReplicaName
	if name == "" {
		name, _ = os.Hostname()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cluster.Join(ctx, cluster.Config{Name: name, URL: cfg.ReplicaURL, Secret: cfg.PeerSecret, DB: pg.DB(), Log: log})
}
