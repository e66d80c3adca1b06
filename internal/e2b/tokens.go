package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// tokens makes and checks the access tokens of sandboxes. A token names
// the sandbox's owner by its API key's name ("" without keys; the session
// owner is api.Owner of it) and is signed with the
// server's secret over its scope, the sandbox id and that owner: any
// replica that shares the secret can check it, and nothing is stored, so
// tokens outlive a park and reach an adopted or forwarded sandbox alike.
//
// A sandbox has two, as on E2B: its envd access token opens its daemons
// (files, processes, the interpreter's runs), its traffic access token
// only its ports. The scope is in the signature, so neither passes for
// the other.
type tokens struct{ secret []byte }

// The scopes of a sandbox's two tokens. envdScope is the one label all
// tokens had before the traffic token was its own: tokens already handed
// out stay valid.
const (
	envdScope    = "e2b-access"
	trafficScope = "e2b-traffic"
)

// issue returns the envd access token of sandbox id, owned by owner.
func (t tokens) issue(id, owner string) string { return t.make(envdScope, id, owner) }

// traffic returns the traffic access token of sandbox id, owned by owner.
func (t tokens) traffic(id, owner string) string { return t.make(trafficScope, id, owner) }

func (t tokens) make(scope, id, owner string) string {
	return hex.EncodeToString([]byte(owner)) + "." + t.mac(scope, id, owner)
}

func (t tokens) mac(scope, id, owner string) string {
	m := hmac.New(sha256.New, t.secret)
	m.Write([]byte(scope + "\x00" + id + "\x00" + owner))
	return hex.EncodeToString(m.Sum(nil))
}

// owner checks an envd access token for sandbox id and returns whose
// sandbox it is.
func (t tokens) owner(id, token string) (string, bool) { return t.check(envdScope, id, token) }

// trafficOwner checks a traffic access token for sandbox id and returns
// whose sandbox it is.
func (t tokens) trafficOwner(id, token string) (string, bool) {
	return t.check(trafficScope, id, token)
}

func (t tokens) check(scope, id, token string) (string, bool) {
	name, mac, ok := strings.Cut(token, ".")
	if !ok {
		return "", false
	}
	raw, err := hex.DecodeString(name)
	if err != nil {
		return "", false
	}
	owner := string(raw)
	return owner, hmac.Equal([]byte(mac), []byte(t.mac(scope, id, owner)))
}

// signedOwner checks a URL signature (the SDK's uploadUrl/downloadUrl):
// "v1_" + base64(sha256("path:operation:user:token[:expiration]")),
// padding stripped, made with the sandbox's token, which the server
// remakes for each owner the signature could be for.
func (t tokens) signedOwner(id, path, operation, user, signature, expiration string, owners []string) (string, bool) {
	if !strings.HasPrefix(signature, "v1_") {
		return "", false
	}
	if expiration != "" {
		exp, err := strconv.ParseInt(expiration, 10, 64)
		if err != nil || time.Now().Unix() > exp {
			return "", false
		}
	}
	for _, owner := range owners {
		token := t.issue(id, owner)
		payload := path + ":" + operation + ":" + user + ":" + token
		if expiration != "" {
			payload += ":" + expiration
		}
		sum := sha256.Sum256([]byte(payload))
		want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
		if hmac.Equal([]byte(want), []byte(signature)) {
			return owner, true
		}
	}
	return "", false
}
