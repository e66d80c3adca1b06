package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/snapstore"
)

// snapshotsGC runs the snapshot store's garbage collection on the store
// the configuration names, as the operator: expired snapshots and the
// leftovers of interrupted writes go; snapshots that fail verification
// are kept and counted (a changed secret must not erase every snapshot).
func snapshotsGC(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("snapshots gc", flag.ContinueOnError)
	fset.SetOutput(stderr)
	asJSON := fset.Bool("json", false, "print the counts as JSON")
	cf := addConfigFlags(fset)
	fset.Usage = func() {
		fmt.Fprint(stderr, snapshotsUsage+"\nFlags:\n")
		cf.printFlags(stderr)
	}
	if status, ok := parse(fset, args); !ok {
		return status
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "codecage snapshots gc: unexpected argument %q\n\n%s", fset.Arg(0), snapshotsUsage)
		return exitUsage
	}
	cfg, ok := loadConfig(cf, stderr, "snapshots gc")
	if !ok {
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, where, err := openSnapshotStore(ctx, cfg)
	if errors.Is(err, fs.ErrNotExist) {
		// Nothing was ever kept there: gc creates nothing (no directory,
		// no secret) that only the server should decide on.
		fmt.Fprintf(stderr, "codecage snapshots gc: no snapshot store at %s (SANDBOX_SNAPSHOT_STORE, SANDBOX_STATE_DIR): nothing to collect\n", where)
		if *asJSON {
			printJSON(stdout, snapstore.GCStats{})
		}
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "codecage snapshots gc: %s: %v\n", where, err)
		return exitFailure
	}
	defer st.Close()
	stats, err := st.GC(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "codecage snapshots gc: %s: %v (removed so far: %d expired, %d leftovers)\n", where, err, stats.Expired, stats.Orphans)
		return exitFailure
	}
	if *asJSON {
		printJSON(stdout, map[string]any{"store": where, "expired": stats.Expired, "orphans": stats.Orphans, "unverified": stats.Unverified})
		return exitOK
	}
	fmt.Fprintf(stdout, "%s: removed %d expired snapshots and %d leftovers of interrupted writes and deletes\n", where, stats.Expired, stats.Orphans)
	if stats.Unverified > 0 {
		fmt.Fprintf(stdout, "%s: kept %d snapshots that fail verification (another SANDBOX_SNAPSHOT_SECRET, or changed on disk)\n", where, stats.Unverified)
	}
	return exitOK
}

// openSnapshotStore opens the store the configuration names, with the
// server's options (as internal/service opens it), and says where it is
// (a directory, or "PostgreSQL": a URL may hold a password). A directory
// store that does not exist yet is fs.ErrNotExist; one without its secret
// is an error, never a new secret.
func openSnapshotStore(ctx context.Context, cfg config.Config) (*snapstore.Store, string, error) {
	dir, dsn, secretFile := cfg.SnapshotPlace()
	where := dir
	if dsn != "" {
		where = "the PostgreSQL snapshot store"
	} else {
		if _, err := os.Stat(dir); err != nil {
			return nil, where, err
		}
		if cfg.SnapshotSecret == "" {
			if _, err := os.Stat(secretFile); err != nil {
				return nil, where, fmt.Errorf("the store's secret %s is missing (%v; SANDBOX_SNAPSHOT_SECRET): no snapshot could be verified", secretFile, err)
			}
		}
	}
	st, err := snapstore.Open(ctx, snapstore.Options{Dir: dir, DSN: dsn, Secret: cfg.SnapshotSecret, SecretFile: secretFile,
		MaxBytes: cfg.SnapshotMaxBytes, MaxCount: cfg.SnapshotMaxCount, TTL: cfg.SnapshotTTL})
	return st, where, err
}
