package cli

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/pgtest"
)

// snapshotSecret seals the snapshots the replicas share.
const snapshotSecret = "snapshot-secret-for-the-cluster-test-0123456789"

// retried sends a request until it is not "unavailable" (a replica that
// drains does not answer until it has parked its sessions and left).
func retried(t *testing.T, method, url, key string, body any) (int, map[string]any) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, res := call(t, method, url, key, body)
		if code != 503 || time.Now().After(deadline) {
			return code, res
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestReplicaDrainParksItsSessions: three replicas and one PostgreSQL,
// which holds the snapshot store. A replica that receives SIGTERM parks
// every session it holds in the store; each then answers, with its state
// and files, through either replica left: one of them takes it over and
// the other forwards to it. A session its owner paused stays paused (it
// waits for its resume), and another key still cannot reach it.
func TestReplicaDrainParksItsSessions(t *testing.T) {
	pg := pgtest.Start(t)
	rs := startReplicas(t, pg.DSN(), 3, "SANDBOX_SNAPSHOT_SECRET="+snapshotSecret)
	open := func(key string, body map[string]any) string {
		t.Helper()
		code, info := call(t, "POST", rs[0].url+"/sessions", key, body)
		if code != 201 && code != 200 {
			t.Fatalf("create: %d %v", code, info)
		}
		id := info["session_id"].(string)
		code, res := call(t, "POST", rs[0].url+"/execute", key, map[string]any{"session_id": id,
			"code": "x = 41\ndef inc(v): return v + 1\nopen('kept.txt', 'w').write('kept ' + str(x))"})
		if code != 200 || res["success"] != true {
			t.Fatalf("setup: %d %v", code, res)
		}
		return id
	}
	running := open(aliceKey, map[string]any{})
	paused := open(aliceKey, map[string]any{"auto_resume": false})
	bobs := open(bobKey, map[string]any{})
	if code, res := call(t, "POST", rs[0].url+"/sessions/"+paused+"/pause", aliceKey, map[string]any{}); code != 200 {
		t.Fatalf("pause: %d %v", code, res)
	}

	_ = rs[0].cmd.Process.Signal(syscall.SIGTERM)
	if err := <-rs[0].exited; err != nil {
		t.Fatalf("replica 0 did not stop cleanly: %v\n%s", err, rs[0].stderr)
	}
	rs[0].exited <- nil // for the cleanup
	if log := rs[0].stderr.String(); !strings.Contains(log, "parked=3") {
		t.Fatalf("replica 0 did not park its three sessions:\n%s", log)
	}

	check := "print(inc(x), open('kept.txt').read())"
	for i, r := range []*server{rs[1], rs[2], rs[1]} {
		code, res := retried(t, "POST", r.url+"/execute", aliceKey, map[string]any{"session_id": running, "code": check})
		if code != 200 || res["stdout"] != "42 kept 41\n" {
			t.Fatalf("request %d for the drained replica's session through %s: %d %v", i, r.url, code, res)
		}
	}
	// One replica took it over: its audit rows name it, and the other
	// forwards there (the same interpreter: a variable set through one is
	// seen through the other).
	if code, res := retried(t, "POST", rs[2].url+"/execute", aliceKey, map[string]any{"session_id": running, "code": "y = 'through 2'"}); code != 200 || res["success"] != true {
		t.Fatalf("set through replica 2: %d %v", code, res)
	}
	if code, res := retried(t, "POST", rs[1].url+"/execute", aliceKey, map[string]any{"session_id": running, "code": "y"}); code != 200 || res["result"] != "through 2" {
		t.Fatalf("read through replica 1: %d %v", code, res)
	}

	// Paused by its owner, with manual resume: paused it stays.
	code, res := retried(t, "GET", rs[2].url+"/sessions/"+paused, aliceKey, nil)
	if code != 200 || res["state"] != "paused" {
		t.Fatalf("the paused session after the drain: %d %v", code, res)
	}
	if code, res := retried(t, "POST", rs[2].url+"/execute", aliceKey, map[string]any{"session_id": paused, "code": "x"}); code != 409 || res["kind"] != "session_paused" {
		t.Fatalf("a request to the paused session: %d %v", code, res)
	}
	if code, res := retried(t, "POST", rs[2].url+"/sessions/"+paused+"/resume", aliceKey, map[string]any{}); code != 200 || res["state"] != "running" {
		t.Fatalf("resume: %d %v", code, res)
	}
	if code, res := retried(t, "POST", rs[1].url+"/execute", aliceKey, map[string]any{"session_id": paused, "code": check}); code != 200 || res["stdout"] != "42 kept 41\n" {
		t.Fatalf("the resumed session: %d %v", code, res)
	}

	// Bob's session came back for bob only.
	if code, res := retried(t, "POST", rs[1].url+"/execute", aliceKey, map[string]any{"session_id": bobs, "code": "x"}); code != 404 && code != 410 {
		t.Fatalf("alice reaching bob's drained session: %d %v", code, res)
	}
	if code, res := retried(t, "POST", rs[2].url+"/execute", bobKey, map[string]any{"session_id": bobs, "code": "inc(x)"}); code != 200 || res["result"] != float64(42) {
		t.Fatalf("bob's drained session: %d %v", code, res)
	}
	code, list := retried(t, "GET", rs[1].url+"/sessions", aliceKey, nil)
	ids := fmt.Sprint(list["sessions"])
	if code != 200 || !strings.Contains(ids, running) || !strings.Contains(ids, paused) || strings.Contains(ids, bobs) {
		t.Fatalf("alice's sessions after the drain: %d %v", code, list)
	}
}

// A download is a stream of calls, not one forwarded request: the first
// request for a drained replica's session may be one, through any
// replica. One takes the session over, the other forwards its reads to it
// (found on a cluster: the file API answered "session lost").
func TestDrainedSessionDownloadsThroughAnyReplica(t *testing.T) {
	pg := pgtest.Start(t)
	rs := startReplicas(t, pg.DSN(), 3, "SANDBOX_SNAPSHOT_SECRET="+snapshotSecret)
	code, info := call(t, "POST", rs[0].url+"/sessions", aliceKey, map[string]any{})
	if code != 201 && code != 200 {
		t.Fatalf("create: %d %v", code, info)
	}
	id := info["session_id"].(string)
	if code, res := call(t, "POST", rs[0].url+"/execute", aliceKey, map[string]any{"session_id": id,
		"code": "x = 41\nopen('kept.txt', 'w').write('kept')"}); code != 200 || res["success"] != true {
		t.Fatalf("setup: %d %v", code, res)
	}
	_ = rs[0].cmd.Process.Signal(syscall.SIGTERM)
	if err := <-rs[0].exited; err != nil {
		t.Fatalf("replica 0 did not stop cleanly: %v\n%s", err, rs[0].stderr)
	}
	rs[0].exited <- nil // for the cleanup
	for i, r := range []*server{rs[1], rs[2], rs[1]} {
		code, res := retried(t, "GET", r.url+"/sessions/"+id+"/files/content?path=kept.txt", aliceKey, nil)
		if code != 200 || res["content"] != "kept" {
			t.Fatalf("download %d of the drained replica's file through %s: %d %v", i, r.url, code, res)
		}
	}
	if code, res := retried(t, "POST", rs[2].url+"/execute", aliceKey, map[string]any{"session_id": id, "code": "x + 1"}); code != 200 || res["result"] != float64(42) {
		t.Fatalf("the session after its downloads: %d %v", code, res)
	}
}
