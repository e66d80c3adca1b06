package config

import (
	"strings"
	"testing"
	"time"
)

// The snapshot settings: defaults, parsing, the secret never printed, and
// where the store is (the shared database when the audit log is in one).
func TestSnapshotSettings(t *testing.T) {
	load := func(env map[string]string) (Config, error) {
		return Load("", func(k string) string { return env[k] }, nil)
	}
	c, err := load(map[string]string{"SANDBOX_STATE_DIR": "/srv/state"})
	if err != nil {
		t.Fatal(err)
	}
	if c.SnapshotTTL != 7*24*time.Hour || c.SnapshotMaxCount != 32 || c.SnapshotMaxBytes != 4<<30 || c.SnapshotSecret != "" {
		t.Fatalf("defaults: %v %d %d %q", c.SnapshotTTL, c.SnapshotMaxCount, c.SnapshotMaxBytes, c.SnapshotSecret)
	}
	if dir, dsn, sf := c.SnapshotPlace(); dir != "/srv/state/snapshots" || dsn != "" || sf != "/srv/state/snapshot-secret" {
		t.Fatalf("default place: %q %q %q", dir, dsn, sf)
	}
	pg := "postgres://u:pw@db:5432/codecage"
	secret := strings.Repeat("s", 32)
	c, err = load(map[string]string{"SANDBOX_AUDIT_DB": pg, "SANDBOX_SNAPSHOT_SECRET": secret, "SANDBOX_SNAPSHOT_TTL": "12h",
		"SANDBOX_SNAPSHOT_MAX_BYTES": "10g", "SANDBOX_SNAPSHOT_MAX_COUNT": "5"})
	if err != nil {
		t.Fatal(err)
	}
	if dir, dsn, _ := c.SnapshotPlace(); dir != "" || dsn != pg {
		t.Fatalf("with a postgres audit log: %q %q", dir, dsn)
	}
	if c.SnapshotTTL != 12*time.Hour || c.SnapshotMaxBytes != 10<<30 || c.SnapshotMaxCount != 5 || c.SnapshotSecret != secret {
		t.Fatalf("parsed: %v %d %d", c.SnapshotTTL, c.SnapshotMaxBytes, c.SnapshotMaxCount)
	}
	s, _ := lookupSetting("snapshot_secret")
	if got := s.get(&c); got != "(set)" {
		t.Fatalf("the secret is shown: %q", got)
	}
	c, err = load(map[string]string{"SANDBOX_AUDIT_DB": pg, "SANDBOX_SNAPSHOT_STORE": "/mnt/snaps"})
	if err != nil {
		t.Fatal(err)
	}
	if dir, dsn, _ := c.SnapshotPlace(); dir != "/mnt/snaps" || dsn != "" {
		t.Fatalf("an explicit directory: %q %q", dir, dsn)
	}
	for _, d := range []struct{ v string }{{"7d"}, {"3600"}, {"90m"}, {"1.5h"}} {
		if _, err := load(map[string]string{"SANDBOX_SNAPSHOT_TTL": d.v}); err != nil {
			t.Errorf("SANDBOX_SNAPSHOT_TTL=%s: %v", d.v, err)
		}
	}
	for _, bad := range []map[string]string{
		{"SANDBOX_SNAPSHOT_SECRET": "too-short"},
		{"SANDBOX_SNAPSHOT_TTL": "0"},
		{"SANDBOX_SNAPSHOT_TTL": "-1d"},
		{"SANDBOX_SNAPSHOT_TTL": "400d"},
		{"SANDBOX_SNAPSHOT_TTL": "NaN"},
		{"SANDBOX_SNAPSHOT_TTL": "1w"},
		{"SANDBOX_SNAPSHOT_STORE": "relative/dir"},
		{"SANDBOX_SNAPSHOT_MAX_COUNT": "0"},
	} {
		if _, err := load(bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}
