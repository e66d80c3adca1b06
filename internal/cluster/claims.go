package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/codecage/codecage/internal/service"
)

// Claims: a session outlives its replica when that replica parked it in
// the shared snapshot store as it stopped. Its id still names the replica
// that made it, so the replicas agree in the database on which of them
// took it over: the first to claim it, for as long as that one is alive.
// A claim of a replica that is gone is taken over by the next claimant.

const claimsSchema = `CREATE TABLE IF NOT EXISTS codecage_session_claims (
		session_id TEXT PRIMARY KEY,
		replica_id TEXT NOT NULL,
		claimed_at TIMESTAMPTZ NOT NULL DEFAULT now()
	)`

// Claim returns the replica that serves session, whose replica is gone:
// the live replica that claimed it already, else this one, which now
// holds the claim (service.Cluster).
func (n *Node) Claim(ctx context.Context, session string) (string, error) {
	var who string
	err := n.reg.db.QueryRowContext(ctx, `
		INSERT INTO codecage_session_claims AS c (session_id, replica_id) VALUES ($1, $2)
		ON CONFLICT (session_id) DO UPDATE SET replica_id = EXCLUDED.replica_id, claimed_at = now()
		WHERE c.replica_id = EXCLUDED.replica_id OR NOT EXISTS (
			SELECT 1 FROM codecage_replicas r WHERE r.id = c.replica_id AND r.stopped_at IS NULL
			AND r.heartbeat_at >= now() - make_interval(secs => $3))
		RETURNING replica_id`, session, n.id, n.reg.stale.Seconds()).Scan(&who)
	if errors.Is(err, sql.ErrNoRows) {
		// A live replica holds it: the update's condition kept its row.
		err = n.reg.db.QueryRowContext(ctx, `SELECT replica_id FROM codecage_session_claims WHERE session_id = $1`, session).Scan(&who)
	}
	if err != nil {
		return "", fmt.Errorf("%w: which replica took over session %s: %v", service.ErrUnavailable, session, err)
	}
	return who, nil
}

// Release drops this replica's claim of session (it is not here after
// all, or it ended).
func (n *Node) Release(ctx context.Context, session string) {
	if _, err := n.reg.db.ExecContext(ctx, `DELETE FROM codecage_session_claims WHERE session_id = $1 AND replica_id = $2`, session, n.id); err != nil {
		n.log.Warn("replica registry: a session's claim could not be dropped", "session", session, "err", err)
	}
}
