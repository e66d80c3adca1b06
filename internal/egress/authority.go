package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// Authority is one sandbox's certificate authority: the proxy presents
// certificates it signs for the hosts it opens HTTPS tunnels to (to add
// credentials), and only that sandbox's trust store holds its certificate.
// The key lives in this process's memory alone, never on disk or in a
// snapshot: a restarted, parked or forked sandbox gets a new authority.
type Authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by host name, at most maxLeaves
}

// authorityLifetime bounds the certificates: longer than any sandbox lives.
const authorityLifetime = 400 * 24 * time.Hour

// maxLeaves bounds the certificates kept per authority; only hosts with a
// credential are intercepted, so a sandbox rarely has more than a few.
const maxLeaves = 256

// NewAuthority makes an authority named for label (the sandbox, in the
// certificate's subject, so a user who inspects it knows what it is).
func NewAuthority(label string) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: authority key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"codecage"}, CommonName: "codecage egress " + clip(label)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(authorityLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress: authority certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Authority{
		cert:   cert,
		key:    key,
		pem:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves: map[string]*tls.Certificate{},
	}, nil
}

// CertificatePEM is the authority's certificate, for the sandbox's trust
// store. Never its key.
func (a *Authority) CertificatePEM() []byte { return a.pem }

// leaf is a certificate for host signed by the authority.
func (a *Authority) leaf(host string) (*tls.Certificate, error) {
	a.mu.Lock()
	c := a.leaves[host]
	a.mu.Unlock()
	if c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, err
	}
	c = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	a.mu.Lock()
	if len(a.leaves) < maxLeaves {
		a.leaves[host] = c
	}
	a.mu.Unlock()
	return c, nil
}

// serial is a random 128-bit serial number, as RFC 5280 asks (positive,
// at most 20 octets).
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n.Add(n, big.NewInt(1))
}
