package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/dataset"
)

// The code LLMs write runs under the defaults, and a local server does not
// refuse its only user: every HumanEval and MBPP program, sent back to back
// by 8 concurrent clients to a `codecage serve` with nothing configured
// (no keys, so no rate limit), gets a 200 and passes, exactly as the same
// programs do under a bare python3.
func TestHumanEvalAndMBPPThroughADefaultServer(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "SANDBOX_AUDIT_DB="+filepath.Join(dir, "audit.db"), "SANDBOX_STATE_DIR="+filepath.Join(dir, "state"))
	for _, suite := range []struct {
		name  string
		tasks []dataset.Task
	}{{"HumanEval", dataset.HumanEval()}, {"MBPP", dataset.MBPP()}} {
		t.Run(suite.name, func(t *testing.T) {
			bare := runAll(suite.tasks, 2, bareOutcome)
			served := runAll(suite.tasks, 8, func(task dataset.Task) string { return servedOutcome(s.url, task) })
			// A CPU-heavy program may pass its 30 s wall-clock limit when
			// the host is overloaded (MBPP/123 did, with two busy loops
			// beside the suite): each that timed out runs again alone,
			// under the same defaults, and must pass then.
			for i, task := range suite.tasks {
				if strings.HasPrefix(served[i], "TimeoutError:") {
					t.Logf("%s timed out among the others (%s); again, alone", task.ID, served[i])
					served[i] = servedOutcome(s.url, task)
				}
			}
			var notBare, notServed []string
			for i, task := range suite.tasks {
				if bare[i] != "" {
					notBare = append(notBare, task.ID+": "+bare[i])
				}
				if served[i] != "" {
					notServed = append(notServed, task.ID+": "+served[i])
				}
			}
			t.Logf("%s: %d programs; bare python3 passes %d, codecage serve %d", suite.name, len(suite.tasks),
				len(suite.tasks)-len(notBare), len(suite.tasks)-len(notServed))
			if len(notBare) > 0 {
				t.Errorf("%d fail under bare python3 (the data set is broken):\n%s", len(notBare), strings.Join(first(notBare, 10), "\n"))
			}
			if len(notServed) > 0 {
				t.Errorf("%d fail through codecage serve:\n%s", len(notServed), strings.Join(first(notServed, 20), "\n"))
			}
		})
	}
}

// runAll runs every task with n workers; the outcome of each is "" when it
// passed, else why not.
func runAll(tasks []dataset.Task, n int, run func(dataset.Task) string) []string {
	out := make([]string, len(tasks))
	next := make(chan int)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for i := range next {
				out[i] = run(tasks[i])
			}
		})
	}
	for i := range tasks {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// bareOutcome runs a program under the host's python3, isolated mode.
func bareOutcome(task dataset.Task) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-I", "-")
	cmd.Stdin = strings.NewReader(task.Program)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Sprintf("%v: %s", err, lastLine(stderr.String()))
	}
	return ""
}

// servedOutcome sends a program to the server's POST /execute.
func servedOutcome(url string, task dataset.Task) string {
	body, _ := json.Marshal(map[string]string{"code": task.Program})
	resp, err := http.Post(url+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("HTTP %d: %s", resp.StatusCode, data)
	}
	var res struct {
		Success bool `json:"success"`
		Error   *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Sprintf("body %q: %v", data, err)
	}
	if !res.Success {
		if res.Error != nil {
			return res.Error.Type + ": " + res.Error.Message
		}
		return "no success: " + string(data)
	}
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func first(list []string, n int) []string {
	sort.Strings(list)
	if len(list) > n {
		return append(list[:n:n], fmt.Sprintf("... and %d more", len(list)-n))
	}
	return list
}
