// Package tlsfixture serves HTTPS for tests under an authority of their
// own, as a private API would be: a certificate for "localhost" on a
// loopback port, and the authority's certificate in a file, for
// SANDBOX_EGRESS_ROOTS.
package tlsfixture

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Server is an HTTPS server for "localhost".
type Server struct {
	*httptest.Server
	// Port is its loopback port; CAFile the authority's certificate.
	Port, CAFile string
}

// Start serves h over HTTPS until the test ends.
func Start(tb testing.TB, h http.Handler) *Server {
	tb.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test private CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{CAFile: filepath.Join(tb.TempDir(), "ca.pem")}
	if err := os.WriteFile(s.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		tb.Fatal(err)
	}
	s.Server = httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}}
	s.StartTLS()
	tb.Cleanup(s.Close)
	_, s.Port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return s
}
