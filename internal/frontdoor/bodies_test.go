package frontdoor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var errCut = errors.New("cut by the drain")

// TestCutEndsBodiesStillArriving: Cut makes a handler blocked reading a
// body that a client trickles in fail at once with the cut error (it
// answers, and its client reads the answer), while a request whose body
// was read whole keeps its context and writes its answer after the cut;
// a request arriving after the cut is cut at its first read.
func TestCutEndsBodiesStillArriving(t *testing.T) {
	b := NewBodies(errCut)
	reading := make(chan struct{}, 1)
	whole := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(b.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow", "/late":
			reading <- struct{}{}
			_, err := io.ReadAll(r.Body)
			if errors.Is(err, errCut) {
				http.Error(w, "stopping", http.StatusServiceUnavailable)
				return
			}
			http.Error(w, fmt.Sprint(err), http.StatusBadRequest)
		case "/whole":
			if _, err := io.ReadAll(r.Body); err != nil {
				t.Errorf("whole body: %v", err)
			}
			close(whole)
			<-release
			if err := r.Context().Err(); err != nil {
				t.Errorf("the cut canceled a request whose body was read whole: %v", err)
			}
			fmt.Fprint(w, "answered")
		}
	})))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	trickle := func(path string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Length: 400000\r\n\r\nabc", path)
		return c, bufio.NewReader(c)
	}
	slow, slowR := trickle("/slow")
	defer slow.Close()
	<-reading

	wholeDone := make(chan string, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/whole", "text/plain", strings.NewReader("all of it"))
		if err != nil {
			wholeDone <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		wholeDone <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	<-whole

	start := time.Now()
	b.Cut()
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := slowR.ReadString('\n'); err != nil || !strings.Contains(line, " 503 ") {
		t.Fatalf("the trickled upload after the cut: %q %v", line, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the cut took %v to end the upload", took)
	}
	close(release)
	if got := <-wholeDone; got != "200 answered" {
		t.Errorf("the request read whole: %s", got)
	}

	late, lateR := trickle("/late")
	defer late.Close()
	<-reading
	_ = late.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := lateR.ReadString('\n'); err != nil || !strings.Contains(line, " 503 ") {
		t.Fatalf("an upload arriving after the cut: %q %v", line, err)
	}
}
