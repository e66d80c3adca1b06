package egress

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// What a credential costs a sandbox's HTTPS request: a new connection
// each time (the worst case: a client without keep-alive), through a
// tunnel the proxy splices and through one it opens to add the header.
// go test -run ^$ -bench Credential ./internal/egress
func BenchmarkCredentialTunnel(b *testing.B) {
	for _, opened := range []bool{false, true} {
		name := "spliced"
		if opened {
			name = "opened"
		}
		b.Run(name, func(b *testing.B) {
			api := newAPIServer(b)
			auth, err := NewAuthority("bench")
			if err != nil {
				b.Fatal(err)
			}
			var binds []Binding
			if opened {
				binds = []Binding{{Secret: "openai", Host: "example.com", Header: "Authorization", Prefix: "Bearer "}}
			}
			p := New(Policy{Allow: []string{"example.com"}}, Options{Authority: auth, UpstreamRoots: api.roots(),
				Resolver: &fakeResolver{hosts: map[string][]netip.Addr{"example.com": {netip.MustParseAddr("127.0.0.1")}}, count: map[string]int{}},
				Logger:   testLogger(io.Discard)})
			defer p.Close()
			if err := p.SetBindings(binds, secrets); err != nil {
				b.Fatal(err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go p.Serve(l)
			trust := x509.NewCertPool()
			trust.AppendCertsFromPEM(auth.CertificatePEM())
			trust.AddCert(api.srv.Certificate())
			target := "https://example.com:" + strconv.Itoa(api.port) + "/v1/x"
			b.ResetTimer()
			for b.Loop() {
				tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()}),
					TLSClientConfig: &tls.Config{RootCAs: trust}, DisableKeepAlives: true}
				c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
				resp, err := c.Get(target)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				tr.CloseIdleConnections()
			}
		})
	}
}

// BenchmarkAuthority is what a sandbox's proxy pays at its start.
func BenchmarkAuthority(b *testing.B) {
	for b.Loop() {
		if _, err := NewAuthority("bench"); err != nil {
			b.Fatal(err)
		}
	}
}
