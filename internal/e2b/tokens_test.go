package e2b

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTokensBindSandboxAndOwner(t *testing.T) {
	tk := tokens{secret: []byte("0123456789abcdef0123456789abcdef")}
	tok := tk.issue("s1", "alice")
	if owner, ok := tk.owner("s1", tok); !ok || owner != "alice" {
		t.Fatalf("own token: %q %v", owner, ok)
	}
	if _, ok := tk.owner("s2", tok); ok {
		t.Fatal("a token opened another sandbox")
	}
	// Claiming another owner in the token breaks its signature.
	forged := strings.Replace(tok, "616c696365", "626f62", 1) // alice -> bob
	if _, ok := tk.owner("s1", forged); ok {
		t.Fatal("a token with a forged owner passed")
	}
	other := tokens{secret: []byte("another secret of thirty-two by")}
	if _, ok := other.owner("s1", tok); ok {
		t.Fatal("a token of another server's secret passed")
	}
	for _, bad := range []string{"", ".", "zz.00", tok + "0"} {
		if _, ok := tk.owner("s1", bad); ok {
			t.Fatalf("token %q passed", bad)
		}
	}
}

// The SDK signs /files URLs with the sandbox's token (uploadUrl,
// downloadUrl); the server remakes the signature for the key's owner.
func TestSignedURLs(t *testing.T) {
	tk := tokens{secret: []byte("0123456789abcdef0123456789abcdef")}
	sign := func(path, op, user, exp string) string {
		payload := path + ":" + op + ":" + user + ":" + tk.issue("s1", "alice")
		if exp != "" {
			payload += ":" + exp
		}
		sum := sha256.Sum256([]byte(payload))
		return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	}
	owners := []string{"", "bob", "alice"}
	if owner, ok := tk.signedOwner("s1", "/home/user/a", "read", "", sign("/home/user/a", "read", "", ""), "", owners); !ok || owner != "alice" {
		t.Fatalf("valid signature: %q %v", owner, ok)
	}
	if _, ok := tk.signedOwner("s1", "/home/user/b", "read", "", sign("/home/user/a", "read", "", ""), "", owners); ok {
		t.Fatal("a signature opened another path")
	}
	if _, ok := tk.signedOwner("s1", "/home/user/a", "write", "", sign("/home/user/a", "read", "", ""), "", owners); ok {
		t.Fatal("a read signature allowed a write")
	}
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	if _, ok := tk.signedOwner("s1", "/home/user/a", "read", "", sign("/home/user/a", "read", "", past), past, owners); ok {
		t.Fatal("an expired signature passed")
	}
}

// A sandbox's two tokens are scoped: the traffic token does not pass for
// the envd token, nor the other way round; each still names its owner.
func TestTokenScopes(t *testing.T) {
	tk := tokens{secret: []byte("0123456789abcdef0123456789abcdef")}
	envd, traffic := tk.issue("s1", "alice"), tk.traffic("s1", "alice")
	if envd == traffic {
		t.Fatalf("one string for both tokens: %q", envd)
	}
	if owner, ok := tk.trafficOwner("s1", traffic); !ok || owner != "alice" {
		t.Fatalf("traffic token: %q %v", owner, ok)
	}
	if _, ok := tk.owner("s1", traffic); ok {
		t.Error("the traffic token passed as the envd token")
	}
	if _, ok := tk.trafficOwner("s1", envd); ok {
		t.Error("the envd token passed as the traffic token")
	}
	if _, ok := tk.trafficOwner("s2", traffic); ok {
		t.Error("a traffic token opened another sandbox")
	}
}
