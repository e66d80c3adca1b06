// Command hostname is the e2e test image: an HTTP server on $PORT (default
// 8080) answering every request with the pod's hostname. `hostname get URL`
// is a tiny HTTP client (the image has no shell or curl) for in-pod checks
// through `kubectl exec`.
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "get" {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(os.Args[2])
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(os.Stdout, resp.Body)
		return
	}
	host, _ := os.Hostname()
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, host)
	})
	log.Printf("hostname %s listening on :%s", host, port)
	log.Fatal(http.ListenAndServe(":"+port, nil))
}
