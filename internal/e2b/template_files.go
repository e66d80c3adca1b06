package e2b

import (
	"archive/tar"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// A template's copy steps upload their files first: the SDK asks
// GET /templates/{templateID}/files/{hash} for an upload URL, PUTs a
// (gzipped) tar of the files there, and names the hash in the step. The
// URL is this server's, signed for that template and hash for an hour
// (the PUT carries no API key). Uploads are kept on disk until the
// template's build ends.

const (
	templateUploadPath = "/codecage/template-files/"
	uploadValidity     = time.Hour
	maxUploadBytes     = 256 << 20 // one archive, as sent
	maxUploadsKept     = 1 << 30   // every archive kept, in all
	maxUploadsPerTpl   = 64
	maxContextBytes    = 1 << 30 // one archive, unpacked
	maxContextEntries  = 100000
)

type templateUploads struct {
	mu    sync.Mutex
	dir   string                      // created at the first upload
	files map[string]map[string]int64 // template -> hash -> size
	total int64
}

// root is the uploads' directory, swept of a previous process's at first use.
func (u *templateUploads) rootLocked(stateDir string) (string, error) {
	if u.dir != "" {
		return u.dir, nil
	}
	base := stateDir
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "e2b-template-files")
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	u.dir, u.files = dir, map[string]map[string]int64{}
	return dir, nil
}

func (u *templateUploads) has(template, hash string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.files[template][hash]
	return ok
}

// put stores one archive for template (read up to the caps).
func (u *templateUploads) put(stateDir, template, hash string, body io.Reader) error {
	u.mu.Lock()
	dir, err := u.rootLocked(stateDir)
	if err == nil && len(u.files[template]) >= maxUploadsPerTpl {
		err = fmt.Errorf("%w: a template has at most %d uploads", service.ErrTooLarge, maxUploadsPerTpl)
	}
	room := maxUploadsKept - u.total
	u.mu.Unlock()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "upload-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(body, min(maxUploadBytes, room)+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n > min(maxUploadBytes, room) {
		return fmt.Errorf("%w: an upload is at most %d bytes, and the uploads kept at most %d", service.ErrTooLarge, int64(maxUploadBytes), int64(maxUploadsKept))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := os.Rename(f.Name(), u.pathLocked(template, hash)); err != nil {
		return err
	}
	if u.files[template] == nil {
		u.files[template] = map[string]int64{}
	}
	u.total += n - u.files[template][hash]
	u.files[template][hash] = n
	return nil
}

func (u *templateUploads) pathLocked(template, hash string) string {
	return filepath.Join(u.dir, template+"."+hash)
}

// drop forgets a template's uploads.
func (u *templateUploads) drop(template string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for hash, n := range u.files[template] {
		_ = os.Remove(u.pathLocked(template, hash))
		u.total -= n
	}
	delete(u.files, template)
}

// context makes a build context holding each upload unpacked in a
// directory named by its hash; the caller removes it. Copy steps that
// reuse an upload (the same source and destination, copied again) name
// its hash again: it is unpacked once, and their COPY lines share it.
func (u *templateUploads) context(template string, hashes []string) (string, error) {
	hashes = slices.Compact(slices.Sorted(slices.Values(hashes)))
	u.mu.Lock()
	dir := u.dir
	var missing string
	for _, h := range hashes {
		if _, ok := u.files[template][h]; !ok {
			missing = h
		}
	}
	u.mu.Unlock()
	if missing != "" {
		return "", fmt.Errorf("the files of hash %s were not uploaded", missing)
	}
	if dir == "" {
		dir = os.TempDir()
	}
	ctxDir, err := os.MkdirTemp(dir, "context-")
	if err != nil {
		return "", err
	}
	for _, h := range hashes {
		u.mu.Lock()
		src := u.pathLocked(template, h)
		u.mu.Unlock()
		if err := unpackUpload(src, filepath.Join(ctxDir, h)); err != nil {
			_ = os.RemoveAll(ctxDir)
			return "", fmt.Errorf("the files of hash %s: %w", h, err)
		}
	}
	return ctxDir, nil
}

// unpackUpload unpacks a tar (gzipped or not) into dest: regular files,
// directories and symbolic links only, no entry outside dest, within the
// caps. Nothing in it is executed or given set-id bits.
func unpackUpload(src, dest string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dest, 0o755); err != nil {
		return err
	}
	// os.Root keeps every entry, and every link it goes through, in dest.
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a tar archive: %v", err)
		}
		if n >= maxContextEntries {
			return fmt.Errorf("more than %d entries", maxContextEntries)
		}
		if err := unpackEntry(root, tr, h, &total); err != nil {
			return err
		}
	}
}

// maybeGunzip reads f through gzip when it starts with gzip's magic.
func maybeGunzip(f *os.File) (io.Reader, error) {
	var magic [2]byte
	_, err := io.ReadFull(f, magic[:])
	if _, serr := f.Seek(0, io.SeekStart); serr != nil {
		return nil, serr
	}
	if err == nil && magic == [2]byte{0x1f, 0x8b} {
		return gzip.NewReader(f)
	}
	return f, nil
}

// unpackEntry makes one archive entry h in root: a directory, a file
// (counted into total, bounded by maxContextBytes) or a symbolic link.
func unpackEntry(root *os.Root, tr *tar.Reader, h *tar.Header, total *int64) error {
	rel := strings.TrimPrefix(h.Name, "./")
	if len(rel) > 4096 || strings.HasPrefix(rel, "/") || slices.Contains(strings.Split(rel, "/"), "..") {
		return fmt.Errorf("entry %s is not a plain relative path", service.Quote(capText(h.Name, 200)))
	}
	name := strings.TrimPrefix(path.Clean("/"+rel), "/")
	if name == "" {
		return nil
	}
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return root.MkdirAll(name, 0o755)
	case tar.TypeReg:
		*total += h.Size
		if *total > maxContextBytes {
			return fmt.Errorf("more than %d bytes unpacked", int64(maxContextBytes))
		}
		out, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(h.Mode).Perm()&^0o022|0o400)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, io.LimitReader(tr, h.Size))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	case tar.TypeSymlink:
		if len(h.Linkname) > 4096 || strings.ContainsRune(h.Linkname, 0) {
			return fmt.Errorf("link %s is too long", service.Quote(capText(h.Name, 200)))
		}
		return root.Symlink(h.Linkname, name)
	}
	return fmt.Errorf("entry %s is neither a file, a directory nor a symbolic link", service.Quote(capText(h.Name, 200)))
}

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
	case !good || !filesHashRE.MatchString(hash):
		writeAPIError(w, http.StatusForbidden, "the upload URL is not one this server signed")
	case time.Now().Unix() > exp:
		writeAPIError(w, http.StatusForbidden, "the upload URL has expired: the SDK asks for a new one when it builds again")
	default:
		if err := s.uploads.put(s.cfg.StateDir, template, hash, r.Body); err != nil {
			s.serviceError(w, err)
			return "template upload"
		}
		w.WriteHeader(http.StatusOK)
	}
	return "template upload"
}
