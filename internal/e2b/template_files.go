package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/e2b/templateplan"
)

// A template's copy steps upload their files first: the SDK asks
// GET /templates/{templateID}/files/{hash} for an upload URL, PUTs a
// (gzipped) tar of the files there, and names the hash in the step. The
// URL is this server's, signed for that template and hash for an hour
// (the PUT carries no API key). Uploads are kept on disk until the
// template's build ends (service.PutBuildUpload).

const (
	templateUploadPath = "/codecage/template-files/"
	uploadValidity     = time.Hour
)

// uploadToken signs an upload URL for template and hash until expires.
func (s *Server) uploadToken(template, hash string, expires int64) string {
	m := hmac.New(sha256.New, s.tokens.secret)
	fmt.Fprintf(m, "template-upload\x00%s\x00%s\x00%d", template, hash, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// uploadURL is where the SDK PUTs a template's files of hash.
func (s *Server) uploadURL(r *http.Request, template, hash string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	exp := time.Now().Add(uploadValidity).Unix()
	return scheme + "://" + r.Host + templateUploadPath + template + "/" + hash +
		"?expires=" + strconv.FormatInt(exp, 10) + "&token=" + s.uploadToken(template, hash, exp)
}

// serveTemplateUpload takes a PUT to a signed upload URL.
func (s *Server) serveTemplateUpload(w http.ResponseWriter, r *http.Request) string {
	template, hash, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, templateUploadPath), "/")
	exp, _ := strconv.ParseInt(r.URL.Query().Get("expires"), 10, 64)
	good := hmac.Equal([]byte(r.URL.Query().Get("token")), []byte(s.uploadToken(template, hash, exp)))
	switch {
	case r.Method != http.MethodPut:
		writeAPIError(w, http.StatusMethodNotAllowed, "a template upload is a PUT")
	case !good || !templateplan.ValidFilesHash(hash):
		writeAPIError(w, http.StatusForbidden, "the upload URL is not one this server signed")
	case time.Now().Unix() > exp:
		writeAPIError(w, http.StatusForbidden, "the upload URL has expired: the SDK asks for a new one when it builds again")
	default:
		if err := s.svc.PutBuildUpload(r.Context(), template, hash, r.Body); err != nil {
			s.serviceError(w, err)
			return "template upload"
		}
		w.WriteHeader(http.StatusOK)
	}
	return "template upload"
}
