// Command image packs an OCI image tarball from layer tarballs and single
// files, with no registry and no container engine: scripts/build-image.sh
// runs it on a root filesystem made by mmdebstrap.
//
// The tarball is an OCI image layout (oci-layout, index.json, blobs/sha256)
// with a Docker manifest.json beside it, as `docker save` writes since
// Docker 25, so `ctr images import`, `podman load` and `docker load` (old
// and new) all read it.
//
// Layers are gzip-compressed once and kept in -cache under the digest of
// their uncompressed content: repacking an image whose root filesystem did
// not change costs one hash of it, not a compression.
package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	User         string              `json:"User,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
	StopSignal   string              `json:"StopSignal,omitempty"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type config struct {
	Created      string      `json:"created"`
	Architecture string      `json:"architecture"`
	OS           string      `json:"os"`
	Config       imageConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// blob is a file to put in blobs/sha256.
type blob struct {
	digest string // hex
	path   string // on disk, or
	data   []byte // in memory
	size   int64
}

// options are the command's flags.
type options struct {
	out, tag, cacheDir                         string
	entrypoint, cmd, workdir, user, stopSignal string
	epoch                                      int64
	layers, files, env, expose, labels         listFlag
}

func main() {
	o := parseFlags()
	created := time.Unix(o.epoch, 0).UTC().Format(time.RFC3339)
	cfg := newConfig(o, created)

	tmp, err := os.MkdirTemp("", "image-pack")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	cache := o.cacheDir
	if cache == "" {
		cache = tmp
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		fail(err)
	}
	layers := o.layers
	if len(o.files) > 0 {
		p := filepath.Join(tmp, "files.tar")
		if err := writeFilesLayer(p, o.files, o.epoch); err != nil {
			fail(err)
		}
		layers = append(layers, p)
	}
	blobs, layerDescs := packLayers(&cfg, layers, cache, created)
	cfgBlob := jsonBlob(cfg)
	m := manifest{SchemaVersion: 2, MediaType: mediaManifest,
		Config: descriptor{MediaType: mediaConfig, Digest: "sha256:" + cfgBlob.digest, Size: cfgBlob.size},
		Layers: layerDescs}
	mBlob := jsonBlob(m)
	name, ref := fullName(o.tag)
	idx := index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{{
		MediaType: mediaManifest, Digest: "sha256:" + mBlob.digest, Size: mBlob.size,
		Annotations: map[string]string{
			"io.containerd.image.name":          name,
			"org.opencontainers.image.ref.name": ref,
		},
		Platform: &platform{Architecture: runtime.GOARCH, OS: "linux"},
	}}}
	dm := []dockerManifest{{Config: "blobs/sha256/" + cfgBlob.digest, RepoTags: []string{o.tag}}}
	for _, b := range blobs {
		dm[0].Layers = append(dm[0].Layers, "blobs/sha256/"+b.digest)
	}
	blobs = append(blobs, cfgBlob, mBlob)
	if err := writeArchive(o.out, o.epoch, blobs, idx, dm); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "image: %s %s, manifest sha256:%s\n", o.out, name, mBlob.digest)
}

// parseFlags reads the flags, or exits with the usage when the output,
// the tag or every layer is missing.
func parseFlags() options {
	var o options
	flag.StringVar(&o.out, "out", "", "image tarball to write")
	flag.StringVar(&o.tag, "tag", "", "image name and tag, e.g. codecage:dev")
	flag.StringVar(&o.cacheDir, "cache", "", "directory of compressed layers, by digest (default: a temporary one)")
	flag.StringVar(&o.entrypoint, "entrypoint", "", "entrypoint, as a JSON array")
	flag.StringVar(&o.cmd, "cmd", "", "command, as a JSON array")
	flag.StringVar(&o.workdir, "workdir", "", "working directory")
	flag.StringVar(&o.user, "user", "", "user")
	flag.StringVar(&o.stopSignal, "stopsignal", "", "stop signal")
	flag.Int64Var(&o.epoch, "epoch", sourceDateEpoch(), "timestamp of the image and of -file entries (default $SOURCE_DATE_EPOCH or 0)")
	flag.Var(&o.layers, "layer", "an uncompressed layer tarball (repeatable, bottom first)")
	flag.Var(&o.files, "file", "HOST:PATH[:MODE], put into one extra top layer (repeatable)")
	flag.Var(&o.env, "env", "KEY=VALUE (repeatable)")
	flag.Var(&o.expose, "expose", "PORT/PROTO (repeatable)")
	flag.Var(&o.labels, "label", "KEY=VALUE (repeatable)")
	flag.Parse()
	if o.out == "" || o.tag == "" || len(o.layers)+len(o.files) == 0 {
		fmt.Fprintln(os.Stderr, "usage: image -out OUT.tar -tag NAME:TAG -layer ROOTFS.tar [-file HOST:PATH:MODE] [options]")
		os.Exit(2)
	}
	return o
}

// newConfig is the image's configuration from the flags, without its
// layers.
func newConfig(o options, created string) config {
	cfg := config{Created: created, Architecture: runtime.GOARCH, OS: "linux"}
	cfg.RootFS.Type = "layers"
	cfg.Config = imageConfig{User: o.user, Env: o.env, WorkingDir: o.workdir, StopSignal: o.stopSignal}
	for _, s := range []struct {
		flag string
		dst  *[]string
	}{{o.entrypoint, &cfg.Config.Entrypoint}, {o.cmd, &cfg.Config.Cmd}} {
		if s.flag != "" {
			if err := json.Unmarshal([]byte(s.flag), s.dst); err != nil {
				fail(fmt.Errorf("%q: not a JSON array of strings: %w", s.flag, err))
			}
		}
	}
	for _, p := range o.expose {
		if cfg.Config.ExposedPorts == nil {
			cfg.Config.ExposedPorts = map[string]struct{}{}
		}
		cfg.Config.ExposedPorts[p] = struct{}{}
	}
	for _, l := range o.labels {
		k, v, _ := strings.Cut(l, "=")
		if cfg.Config.Labels == nil {
			cfg.Config.Labels = map[string]string{}
		}
		cfg.Config.Labels[k] = v
	}
	return cfg
}

// packLayers compresses each layer (or finds it in cache) and adds it to
// cfg's root filesystem and history: it returns the layers' blobs and
// their descriptors for the manifest.
func packLayers(cfg *config, layers []string, cache, created string) ([]blob, []descriptor) {
	var blobs []blob
	var layerDescs []descriptor
	for _, l := range layers {
		diffID, gz, err := compressLayer(l, cache)
		if err != nil {
			fail(fmt.Errorf("layer %s: %w", l, err))
		}
		fi, err := os.Stat(gz)
		if err != nil {
			fail(err)
		}
		digest := strings.TrimSuffix(filepath.Base(gz), ".tar.gz")
		digest = strings.TrimPrefix(digest, "sha256-")
		blobs = append(blobs, blob{digest: digest, path: gz, size: fi.Size()})
		layerDescs = append(layerDescs, descriptor{MediaType: mediaLayer, Digest: "sha256:" + digest, Size: fi.Size()})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, "sha256:"+diffID)
		cfg.History = append(cfg.History, history{Created: created, CreatedBy: "deploy/image " + filepath.Base(l)})
	}
	return blobs, layerDescs
}

// fullName is the tag as containerd names it (docker.io/library/...) and
// the reference annotation (the tag alone, as docker save writes it).
func fullName(tag string) (string, string) {
	name, ref := tag, "latest"
	if i := strings.LastIndex(tag, ":"); i > strings.LastIndex(tag, "/") {
		name, ref = tag[:i], tag[i+1:]
	}
	first, _, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		name = "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		name = "docker.io/" + name
	}
	return name + ":" + ref, ref
}

func sourceDateEpoch() int64 {
	n, _ := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	return n
}

func jsonBlob(v any) blob {
	b, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	sum := sha256.Sum256(b)
	return blob{digest: hex.EncodeToString(sum[:]), data: b, size: int64(len(b))}
}

// compressLayer returns the digest of the uncompressed layer and the path
// of its gzip in cache (named sha256-<compressed digest>.tar.gz, found
// again through diff-<diffID>).
func compressLayer(layer, cache string) (string, string, error) {
	f, err := os.Open(layer)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return "", "", err
	}
	diffID := hex.EncodeToString(h.Sum(nil))
	link := filepath.Join(cache, "diff-"+diffID)
	if target, err := os.Readlink(link); err == nil {
		gz := filepath.Join(cache, target)
		if _, err := os.Stat(gz); err == nil {
			return diffID, gz, nil
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", "", err
	}
	tmp, err := os.CreateTemp(cache, "layer-*.tmp")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(tmp.Name())
	ch := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, ch), 1<<20)
	zw := gzip.NewWriter(bw)
	if _, err := io.Copy(zw, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return "", "", err
	}
	if err := zw.Close(); err != nil {
		return "", "", err
	}
	if err := bw.Flush(); err != nil {
		return "", "", err
	}
	if err := tmp.Close(); err != nil {
		return "", "", err
	}
	name := "sha256-" + hex.EncodeToString(ch.Sum(nil)) + ".tar.gz"
	if err := os.Rename(tmp.Name(), filepath.Join(cache, name)); err != nil {
		return "", "", err
	}
	_ = os.Remove(link)
	if err := os.Symlink(name, link); err != nil {
		return "", "", err
	}
	return diffID, filepath.Join(cache, name), nil
}

// writeFilesLayer writes a layer of HOST:PATH[:MODE] files, owned by root,
// with their parent directories, at a fixed time.
func writeFilesLayer(out string, specs []string, epoch int64) error {
	type entry struct {
		host, path string
		mode       int64
	}
	var entries []entry
	dirs := map[string]bool{}
	for _, s := range specs {
		parts := strings.Split(s, ":")
		if len(parts) < 2 || len(parts) > 3 || !strings.HasPrefix(parts[1], "/") {
			return fmt.Errorf("-file %q: want HOST:/PATH[:MODE]", s)
		}
		e := entry{host: parts[0], path: strings.TrimPrefix(path.Clean(parts[1]), "/"), mode: 0o644}
		if len(parts) == 3 {
			m, err := strconv.ParseInt(parts[2], 8, 32)
			if err != nil {
				return fmt.Errorf("-file %q: mode: %w", s, err)
			}
			e.mode = m
		}
		entries = append(entries, e)
		for d := path.Dir(e.path); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	mtime := time.Unix(epoch, 0)
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl)
	for _, d := range dl {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	for _, e := range entries {
		src, err := os.Open(e.host)
		if err != nil {
			return err
		}
		fi, err := src.Stat()
		if err != nil {
			src.Close()
			return err
		}
		if !fi.Mode().IsRegular() {
			src.Close()
			return fmt.Errorf("%s: not a regular file", e.host)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.path, Mode: e.mode, Size: fi.Size(), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			src.Close()
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func writeArchive(out string, epoch int64, blobs []blob, idx index, dm []dockerManifest) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	bw := bufio.NewWriterSize(f, 1<<20)
	t := archive{tw: tar.NewWriter(bw), mtime: time.Unix(epoch, 0)}
	if err := t.dir("blobs/"); err != nil {
		return err
	}
	if err := t.dir("blobs/sha256/"); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, b := range blobs {
		if seen[b.digest] {
			continue
		}
		seen[b.digest] = true
		if err := t.blob(b); err != nil {
			return err
		}
	}
	if err := t.data("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := t.data("index.json", mustJSON(idx)); err != nil {
		return err
	}
	if err := t.data("manifest.json", mustJSON(dm)); err != nil {
		return err
	}
	if err := t.tw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// archive writes the image tarball's entries, all at one time.
type archive struct {
	tw    *tar.Writer
	mtime time.Time
}

func (t archive) dir(name string) error {
	return t.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: t.mtime})
}

func (t archive) data(name string, b []byte) error {
	if err := t.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: t.mtime}); err != nil {
		return err
	}
	_, err := t.tw.Write(b)
	return err
}

// blob writes b under blobs/sha256, from memory or from its file, which
// must not have changed size since it was measured.
func (t archive) blob(b blob) error {
	name := "blobs/sha256/" + b.digest
	if b.path == "" {
		return t.data(name, b.data)
	}
	src, err := os.Open(b.path)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := t.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: b.size, ModTime: t.mtime}); err != nil {
		return err
	}
	n, err := io.Copy(t.tw, src)
	if err != nil {
		return err
	}
	if n != b.size {
		return errors.New(b.path + ": changed while packing")
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	return b
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}
