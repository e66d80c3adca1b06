package e2b_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
)

// runStream runs a command line through envd's Start as the SDK does
// (bash -l -c) and returns its stdout, stderr and exit code.
func runStream(t *testing.T, b *box, line string) (string, string, int) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", line}}})
	raw := startProcess(t, b, msg)
	var stdout, stderr strings.Builder
	exit := -1000
	for len(raw) >= 5 {
		n := int(raw[1])<<24 | int(raw[2])<<16 | int(raw[3])<<8 | int(raw[4])
		if len(raw) < 5+n {
			break
		}
		var ev struct {
			Event struct {
				Data *struct{ Stdout, Stderr string } `json:"data"`
				End  *struct {
					ExitCode int `json:"exitCode"`
				} `json:"end"`
			} `json:"event"`
		}
		if raw[0] == 0 && json.Unmarshal(raw[5:5+n], &ev) == nil {
			if d := ev.Event.Data; d != nil {
				o, _ := base64.StdEncoding.DecodeString(d.Stdout)
				e, _ := base64.StdEncoding.DecodeString(d.Stderr)
				stdout.Write(o)
				stderr.Write(e)
			}
			if ev.Event.End != nil {
				exit = ev.Event.End.ExitCode
			}
		}
		raw = raw[5+n:]
	}
	return stdout.String(), stderr.String(), exit
}

// startProcess sends envd's Start with msg to b, as the SDK does, and
// returns the whole framed answer.
func startProcess(t *testing.T, b *box, msg []byte) []byte {
	t.Helper()
	req, _ := http.NewRequest("POST", b.srv.URL+"/process.Process/Start", bytes.NewReader(envelope(0, msg)))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("E2b-Sandbox-Id", b.id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return raw
}

// An E2B sandbox is a machine: the programs agents expect in a shell run,
// and act within the sandbox (its own processes, files and identity); a
// program with power over the host runs too, and finds it has none.
func TestE2BShellHasTheUsualPrograms(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	for line, want := range map[string]string{
		"sleep 0.1 && echo slept":                      "slept\n",
		"env | grep -c '^HOME=/home/user$'":            "1\n",
		"printenv HOME":                                "/home/user\n",
		"id -u":                                        "1000\n",
		"whoami":                                       "user\n",
		"nproc | grep -cE '^[0-9]+$'":                  "1\n",
		"realpath .":                                   "/home/user\n",
		"touch a && ln -s a b && readlink -f b":        "/home/user/a\n",
		"basename /x/y && dirname /x/y":                "y\n/x\n",
		"ps -e -o comm= | grep -c '^ps$'":              "1\n",
		"sleep 30 & /bin/kill -9 $!; wait $!; echo $?": "137\n",
	} {
		stdout, stderr, exit := runStream(t, b, line)
		if stdout != want || exit != 0 {
			t.Errorf("%s: %q %q exit %d, want %q", line, stdout, stderr, exit, want)
		}
	}
	if _, err := exec.LookPath("git"); err == nil {
		if stdout, stderr, exit := runStream(t, b, "git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m m && git log --format=%s"); stdout != "m\n" || exit != 0 {
			t.Errorf("git: %q %q exit %d", stdout, stderr, exit)
		}
	}
	// No set-user-ID, no capability, no network.
	for _, line := range []string{"su -c id", "mount -t tmpfs none /tmp", "curl -sS --max-time 5 http://example.com"} {
		if stdout, _, exit := runStream(t, b, line); exit == 0 {
			t.Errorf("%s succeeded: %q", line, stdout)
		}
	}
}

// With machines off, a sandbox's commands keep to the command list: what
// is not on it is not there to run.
func TestE2BShellKeepsToTheListWithoutMachines(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.MachineSessions = false })
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	for _, line := range []string{"su -c id", "mount", "curl http://example.com"} {
		if _, _, exit := runStream(t, b, line); exit != 127 && exit != 126 {
			t.Errorf("%s ran: exit %d", line, exit)
		}
	}
}
