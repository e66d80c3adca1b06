package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// registryLock is the advisory lock key under which replicas create the
// registry table, so that several starting at once do not race.
const registryLock = 0x636f646563616766

// The registry is one table in the deployment's shared PostgreSQL: each
// process (an incarnation: a restarted pod is a new one) adds its row at
// start, refreshes heartbeat_at while it runs, and sets stopped_at as it
// stops. Liveness is judged on the database's clock, so replicas' clocks
// need not agree.
var registrySchema = []string{
	`CREATE TABLE IF NOT EXISTS codecage_replicas (
		id           TEXT PRIMARY KEY,
		name         TEXT NOT NULL,
		url          TEXT NOT NULL,
		started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
		heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
		stopped_at   TIMESTAMPTZ
	)`,
	claimsSchema,
}

// replica is one row of the registry as this process last read it.
type replica struct {
	ID, Name, URL string
	// Stopped: it said it stopped. Stale: it has not sent a heartbeat in
	// time (crashed, or cut off).
	Stopped, Stale bool
	// Since is how long ago it stopped or sent its last heartbeat.
	Since time.Duration
}

func (r replica) alive() bool { return !r.Stopped && !r.Stale }

// registry reads and writes the replicas table and keeps a copy of it.
type registry struct {
	db    *sql.DB
	stale time.Duration // no heartbeat for this long: gone

	mu    sync.Mutex
	known map[string]replica
}

func (g *registry) migrate(ctx context.Context) error {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(registryLock)); err != nil {
		return err
	}
	for _, stmt := range registrySchema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	// Rows of replicas long gone: a session id naming one is then simply
	// unknown.
	if _, err := tx.ExecContext(ctx, `DELETE FROM codecage_replicas WHERE heartbeat_at < now() - interval '7 days'`); err != nil {
		return err
	}
	// Claims of replicas no longer on record: any replica may take
	// those sessions over anyway.
	if _, err := tx.ExecContext(ctx, `DELETE FROM codecage_session_claims c
		WHERE NOT EXISTS (SELECT 1 FROM codecage_replicas r WHERE r.id = c.replica_id)`); err != nil {
		return err
	}
	return tx.Commit()
}

func (g *registry) join(ctx context.Context, id, name, url string) error {
	_, err := g.db.ExecContext(ctx, `INSERT INTO codecage_replicas (id, name, url) VALUES ($1, $2, $3)`, id, name, url)
	return err
}

func (g *registry) heartbeat(ctx context.Context, id string) error {
	res, err := g.db.ExecContext(ctx, `UPDATE codecage_replicas SET heartbeat_at = now() WHERE id = $1 AND stopped_at IS NULL`, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errors.New("this replica's row is gone from the registry")
	}
	return nil
}

func (g *registry) leave(ctx context.Context, id string) error {
	_, err := g.db.ExecContext(ctx, `UPDATE codecage_replicas SET stopped_at = now() WHERE id = $1`, id)
	return err
}

const replicaColumns = `id, name, url, stopped_at IS NOT NULL,
	stopped_at IS NULL AND heartbeat_at < now() - make_interval(secs => $1),
	extract(epoch FROM now() - coalesce(stopped_at, heartbeat_at))`

func scanReplica(row interface{ Scan(...any) error }) (replica, error) {
	var r replica
	var since float64
	err := row.Scan(&r.ID, &r.Name, &r.URL, &r.Stopped, &r.Stale, &since)
	r.Since = time.Duration(since * float64(time.Second))
	return r, err
}

// refresh reads every replica seen in the last day into the copy.
func (g *registry) refresh(ctx context.Context) error {
	rows, err := g.db.QueryContext(ctx, `SELECT `+replicaColumns+` FROM codecage_replicas
		WHERE heartbeat_at > now() - interval '1 day' OR stopped_at > now() - interval '1 day'`, g.stale.Seconds())
	if err != nil {
		return err
	}
	defer rows.Close()
	known := map[string]replica{}
	for rows.Next() {
		r, err := scanReplica(rows)
		if err != nil {
			return err
		}
		known[r.ID] = r
	}
	if err := rows.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	g.known = known
	g.mu.Unlock()
	return nil
}

// lookup returns what the registry says of id: from the copy, or from the
// database when fresh is set or the copy does not have it. ok is false
// when no such replica is on record.
func (g *registry) lookup(ctx context.Context, id string, fresh bool) (r replica, ok bool, err error) {
	if !fresh {
		g.mu.Lock()
		r, ok = g.known[id]
		g.mu.Unlock()
		if ok {
			return r, true, nil
		}
	}
	r, err = scanReplica(g.db.QueryRowContext(ctx, `SELECT `+replicaColumns+` FROM codecage_replicas WHERE id = $2`, g.stale.Seconds(), id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		// The database is away: the copy is the best there is.
		g.mu.Lock()
		r, ok = g.known[id]
		g.mu.Unlock()
		if ok {
			return r, true, nil
		}
		return r, false, fmt.Errorf("reading the replica registry: %w", err)
	}
	g.mu.Lock()
	if g.known == nil {
		g.known = map[string]replica{}
	}
	g.known[id] = r
	g.mu.Unlock()
	return r, true, nil
}

// alive lists the replicas the copy holds as alive.
func (g *registry) alive() []replica {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []replica
	for _, r := range g.known {
		if r.alive() {
			out = append(out, r)
		}
	}
	return out
}
