package envstore

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageKind says where an image was read from, which decides what of a
// layer can be checked: a docker archive names its layers by file, so
// only their diff IDs (in the config) check them; a layout, an OCI
// archive and a registry name each blob by its digest too.
type imageKind string

const (
	kindDocker     imageKind = "docker archive"
	kindLayout     imageKind = "OCI layout"
	kindOCIArchive imageKind = "OCI archive"
	kindRemote     imageKind = "registry"
)

// maxConfigBytes caps an image's config; real ones are a few KiB.
const maxConfigBytes = 4 << 20

// ImageConfig is what an image says its containers start with.
type ImageConfig struct {
	Env        []string
	WorkingDir string
	Entrypoint []string
	Cmd        []string
}

// ImportImage unpacks the image at ref (an image tarball, an OCI layout
// directory, or a reference the host can reach) into st.Root(): layers in
// order, whiteouts honoured, nothing executed, every entry checked
// (ErrBadImage).
func (s *Store) ImportImage(ctx context.Context, st *Staging, ref string, log io.Writer) (ImageConfig, error) {
	if log == nil {
		log = io.Discard
	}
	defer os.RemoveAll(filepath.Join(st.dir, "oci")) // an OCI archive's copy, if any
	img, kind, err := s.openImage(ctx, st, ref)
	if err != nil {
		return ImageConfig{}, err
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return ImageConfig{}, fmt.Errorf("%w: %s: config: %v", ErrBadImage, kind, err)
	}
	if len(raw) > maxConfigBytes {
		return ImageConfig{}, fmt.Errorf("%w: %s: config is %d bytes (cap %d)", ErrBadImage, kind, len(raw), maxConfigBytes)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return ImageConfig{}, fmt.Errorf("%w: %s: config: %v", ErrBadImage, kind, err)
	}
	if cfg.Architecture != "" && cfg.Architecture != runtime.GOARCH {
		return ImageConfig{}, fmt.Errorf("%w: the image is for %.32q, this host runs %s", ErrBadImage, cfg.Architecture, runtime.GOARCH)
	}
	layers, err := img.Layers()
	if err != nil {
		return ImageConfig{}, fmt.Errorf("%w: %s: layers: %v", ErrBadImage, kind, err)
	}
	if len(layers) > s.Limits.MaxLayers {
		return ImageConfig{}, fmt.Errorf("%w: %d layers (cap %d)", ErrBadImage, len(layers), s.Limits.MaxLayers)
	}
	// The diff IDs come from the config: asking a layer for its own
	// would make the library decompress it whole first.
	if len(cfg.RootFS.DiffIDs) != len(layers) {
		return ImageConfig{}, fmt.Errorf("%w: %s: the config lists %d diff IDs for %d layers", ErrBadImage, kind, len(cfg.RootFS.DiffIDs), len(layers))
	}
	u, err := newUnpacker(st.Root(), s.Limits, log)
	if err != nil {
		return ImageConfig{}, err
	}
	defer u.close()
	for i, l := range layers {
		label := fmt.Sprintf("layer %d/%d", i+1, len(layers))
		if err := importLayer(ctx, u, l, cfg.RootFS.DiffIDs[i], kind, label, log); err != nil {
			return ImageConfig{}, err
		}
	}
	fmt.Fprintf(log, "unpacked %d layers: %d entries, %d bytes\n", len(layers), u.entries, u.bytes)
	return ImageConfig{
		Env:        cfg.Config.Env,
		WorkingDir: cfg.Config.WorkingDir,
		Entrypoint: cfg.Config.Entrypoint,
		Cmd:        cfg.Config.Cmd,
	}, nil
}

// importLayer streams one layer, checked, through the unpacker.
func importLayer(ctx context.Context, u *unpacker, l v1.Layer, diffID v1.Hash, kind imageKind, label string, log io.Writer) error {
	ls, err := openLayer(l, diffID, kind, label)
	if err != nil {
		return err
	}
	defer ls.Close()
	fmt.Fprintf(log, "%s: %s\n", label, ls.describe())
	if err := u.apply(ctx, ls, label); err != nil {
		return err
	}
	return ls.finish()
}

// openImage reads ref as a file or directory when one exists there, and
// as a registry reference only when none does.
func (s *Store) openImage(ctx context.Context, st *Staging, ref string) (v1.Image, imageKind, error) {
	fi, err := os.Stat(ref)
	switch {
	case err == nil && fi.IsDir():
		img, err := openLayout(ref)
		return img, kindLayout, err
	case err == nil && fi.Mode().IsRegular():
		return s.openArchive(st, ref)
	case err == nil:
		return nil, "", fmt.Errorf("%w: %s is neither a file nor a directory", ErrBadImage, ref)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, "", fmt.Errorf("envstore: %w", err)
	}
	if strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, ".") {
		return nil, "", fmt.Errorf("%w: no image file or directory at %s", ErrBadImage, ref)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s is no file, directory or image reference: %v", ErrBadImage, ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return nil, "", fmt.Errorf("envstore: the registry of %s cannot be reached or refused the image: %w", r.Name(), err)
	}
	return img, kindRemote, nil
}

// openArchive tells a docker archive (manifest.json) from an OCI archive
// (oci-layout and index.json in a tar) by the names inside; Docker 25
// writes both, and its manifest.json is the simpler path.
func (s *Store) openArchive(st *Staging, file string) (v1.Image, imageKind, error) {
	names, err := archiveNames(file)
	if err != nil {
		return nil, "", err
	}
	switch {
	case names["manifest.json"]:
		img, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			return nil, "", fmt.Errorf("%w: docker archive %s: %v", ErrBadImage, filepath.Base(file), err)
		}
		return img, kindDocker, nil
	case names["oci-layout"] && names["index.json"]:
		dir := filepath.Join(st.dir, "oci")
		if err := unpackOCIArchive(file, dir, s.Limits); err != nil {
			return nil, "", err
		}
		img, err := openLayout(dir)
		return img, kindOCIArchive, err
	}
	return nil, "", fmt.Errorf("%w: %s is a tar with neither manifest.json (docker save) nor oci-layout and index.json (OCI archive)", ErrBadImage, filepath.Base(file))
}

// archiveNames lists the top-level metadata names of a tar (headers only:
// the reader seeks over bodies).
func archiveNames(file string) (map[string]bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("envstore: %w", err)
	}
	defer f.Close()
	names := map[string]bool{}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not a readable tar archive (a compressed image must be decompressed first): %v", ErrBadImage, filepath.Base(file), err)
		}
		if n > 1_000_000 {
			return nil, fmt.Errorf("%w: %s holds over a million entries", ErrBadImage, filepath.Base(file))
		}
		switch p := path.Clean(hdr.Name); p {
		case "manifest.json", "oci-layout", "index.json":
			names[p] = true
		}
	}
}

// unpackOCIArchive copies an OCI archive's layout files (oci-layout,
// index.json, blobs/<alg>/<hex>, nothing else) into dir, so the layout
// reader can open it. Only regular files of those names are taken; their
// total is capped like an image's content.
func unpackOCIArchive(file, dir string, lim Limits) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("envstore: %w", err)
	}
	defer f.Close()
	var total int64
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: OCI archive: %v", ErrBadImage, err)
		}
		p := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		parts := strings.Split(p, "/")
		ok := p == "oci-layout" || p == "index.json" ||
			(len(parts) == 3 && parts[0] == "blobs" && validDigestPart(parts[1]) && validDigestPart(parts[2]))
		if !ok || hdr.Typeflag != tar.TypeReg {
			continue
		}
		total += hdr.Size
		if total > lim.MaxBytes {
			return fmt.Errorf("%w: OCI archive: %q passes the %d-byte cap", ErrBadImage, capName(hdr.Name), lim.MaxBytes)
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return fmt.Errorf("envstore: %w", err)
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("envstore: %w", err)
		}
		_, err = io.CopyN(out, tr, hdr.Size)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%w: OCI archive: %q: %v", ErrBadImage, capName(hdr.Name), err)
		}
	}
}

// validDigestPart is an algorithm or hex name: letters and digits only.
func validDigestPart(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// openLayout picks the image of an OCI layout: the one image, or the one
// for this host's platform (through nested indexes, a few levels deep).
func openLayout(dir string) (v1.Image, error) {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return nil, fmt.Errorf("%w: %s is not an OCI layout (no oci-layout file)", ErrBadImage, dir)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", ErrBadImage, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", ErrBadImage, err)
	}
	return pickImage(idx, 0)
}

func pickImage(idx v1.ImageIndex, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, fmt.Errorf("%w: OCI layout: indexes nested over 4 deep", ErrBadImage)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: index: %v", ErrBadImage, err)
	}
	var images, indexes []v1.Descriptor
	for _, d := range im.Manifests {
		if d.Platform != nil && (d.Platform.OS != "linux" || d.Platform.Architecture != runtime.GOARCH) {
			continue
		}
		switch d.MediaType {
		case types.OCIManifestSchema1, types.DockerManifestSchema2:
			images = append(images, d)
		case types.OCIImageIndex, types.DockerManifestList:
			indexes = append(indexes, d)
		}
	}
	switch {
	case len(images) == 1:
		img, err := idx.Image(images[0].Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: OCI layout: %v", ErrBadImage, err)
		}
		return img, nil
	case len(images) > 1:
		return nil, fmt.Errorf("%w: OCI layout holds %d images for linux/%s; keep one", ErrBadImage, len(images), runtime.GOARCH)
	case len(indexes) == 1:
		child, err := idx.ImageIndex(indexes[0].Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: OCI layout: %v", ErrBadImage, err)
		}
		return pickImage(child, depth+1)
	}
	return nil, fmt.Errorf("%w: OCI layout holds no image for linux/%s", ErrBadImage, runtime.GOARCH)
}

// capName bounds an image-controlled name quoted in an error or log line.
func capName(s string) string {
	const max = 200
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
