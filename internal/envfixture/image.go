package envfixture

import (
	"archive/tar"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TarEntry is one entry of an in-memory layer.
type TarEntry struct {
	Name string
	// Type is a tar type flag (tar.TypeReg when 0).
	Type byte
	// Mode is the permission bits (0644, or 0755 for a directory, when 0).
	Mode     int64
	Body     []byte
	Linkname string
}

// LayerTar is the uncompressed tar of entries, in order.
func LayerTar(entries []TarEntry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Mode: e.Mode, Linkname: e.Linkname, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Size > 0 {
			if _, err := tw.Write(e.Body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Layer is a gzip layer of entries, as go-containerregistry builds one.
func Layer(entries []TarEntry) (v1.Layer, error) {
	b, err := LayerTar(entries)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithCompressedCaching)
}

// UncompressedLayer is a layer whose blob is the plain tar, as
// `docker save` writes them.
func UncompressedLayer(entries []TarEntry) (v1.Layer, error) {
	b, err := LayerTar(entries)
	if err != nil {
		return nil, err
	}
	h := sum(b)
	return &rawLayer{blob: b, digest: h, diffID: h, mediaType: types.DockerUncompressedLayer}, nil
}

// LayerFromDir is a gzip layer of the tree under dir (links kept as
// links, owners left out), so a test can wrap a root it built into an
// image. The tree is read again each time the layer is.
func LayerFromDir(dir string) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarDir(dir, pw)) }()
		return pr, nil
	}, tarball.WithCompressedCaching)
}

func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // a socket or device: not part of a root
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.CopyN(tw, f, h.Size)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// DefaultConfig is the config fixture images carry.
var DefaultConfig = v1.Config{
	Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"},
	WorkingDir: "/work",
	Entrypoint: []string{"/usr/bin/env"},
	Cmd:        []string{"python3"},
}

// Image stacks layers, first at the bottom, under DefaultConfig, for
// linux on this host's architecture.
func Image(layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", runtime.GOARCH, DefaultConfig
	return mutate.ConfigFile(img, cf)
}

// WriteDockerArchive writes img as `docker save` does (manifest.json,
// config, one file per layer).
func WriteDockerArchive(out string, img v1.Image) error {
	ref, err := name.ParseReference("codecage.test/envfixture:latest")
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, ref, img)
}

// WriteOCILayout writes img as an OCI image layout directory.
func WriteOCILayout(dir string, img v1.Image) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
}

// WriteOCIArchive writes img as an OCI archive: a layout in a tar, what
// `buildah push oci-archive:` makes.
func WriteOCIArchive(out string, img v1.Image) error {
	dir, err := os.MkdirTemp("", "envfixture-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := WriteOCILayout(dir, img); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tarDir(dir, f); err != nil {
		return err
	}
	return f.Close()
}

// Hostile layers' entries. Each must be refused, naming the entry.

// EscapeDotDot climbs out of the root with "..".
func EscapeDotDot() []TarEntry {
	return []TarEntry{{Name: "../../etc/envfixture-escape", Body: []byte("escaped\n")}}
}

// EscapeAbsolute names an absolute path.
func EscapeAbsolute() []TarEntry {
	return []TarEntry{{Name: "/etc/envfixture-escape", Body: []byte("escaped\n")}}
}

// SymlinkThenWrite plants a symlink to target and writes a file through it.
func SymlinkThenWrite(target string) []TarEntry {
	return []TarEntry{
		{Name: "evil", Type: tar.TypeSymlink, Linkname: target},
		{Name: "evil/planted", Body: []byte("planted\n")},
	}
}

// HardLinkOutside hard-links to a file outside the root.
func HardLinkOutside() []TarEntry {
	return []TarEntry{{Name: "passwd", Type: tar.TypeLink, Linkname: "../../../../../../etc/passwd"}}
}

// HardLinkAbsolute hard-links to an absolute host path.
func HardLinkAbsolute() []TarEntry {
	return []TarEntry{{Name: "passwd", Type: tar.TypeLink, Linkname: "/etc/passwd"}}
}

// WhiteoutDotDot whites out "..".
func WhiteoutDotDot() []TarEntry {
	return []TarEntry{{Name: "usr/.wh...", Body: nil}}
}

// HugeSize is what HugeLayer's one entry claims.
const HugeSize = 10 << 30

// HugeLayer is a gzip layer whose one entry, "huge.bin", claims (and,
// read to the end, holds) HugeSize zero bytes. Its ~10 MB blob is made
// on the fly from one reusable deflate block, never held in memory; its
// diff ID is not computed (that would hash 10 GiB), so a reader must
// refuse it before checking that.
func HugeLayer() (v1.Layer, error) {
	hugeOnce.Do(buildHuge)
	if hugeErr != nil {
		return nil, hugeErr
	}
	return &rawLayer{
		open:      hugeBlob,
		digest:    hugeDigest,
		size:      hugeBlobSize,
		diffID:    sum([]byte("envfixture: HugeLayer's diff ID is not computed")),
		mediaType: types.DockerLayer,
	}, nil
}

var (
	hugeOnce                 sync.Once
	hugeErr                  error
	hugeHead, hugeMid, hugeT []byte
	hugeMidCount             int
	hugeDigest               v1.Hash
	hugeBlobSize             int64
)

// buildHuge deflates the tar header and 64 KiB of zeros, then 1 MiB of
// zeros, then the rest: once the 32 KiB window holds only zeros, the
// 1 MiB block decodes the same wherever it is repeated.
func buildHuge() {
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if hugeErr = tw.WriteHeader(&tar.Header{Name: "huge.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: HugeSize, Format: tar.FormatPAX}); hugeErr != nil {
		return
	}
	zeros := HugeSize + 1024 // the body, then the tar's two end blocks
	const prime, block = 64 << 10, 1 << 20
	hugeMidCount = (zeros - prime) / block
	rest := zeros - prime - hugeMidCount*block

	var out bytes.Buffer
	fw, _ := flate.NewWriter(&out, flate.BestCompression)
	cut := func() []byte { b := bytes.Clone(out.Bytes()); out.Reset(); return b }
	fw.Write(hdr.Bytes())
	fw.Write(make([]byte, prime))
	fw.Flush()
	hugeHead = append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, cut()...)
	fw.Write(make([]byte, block))
	fw.Flush()
	hugeMid = cut()
	fw.Write(make([]byte, rest))
	fw.Close()
	hugeT = cut()
	crc := crc32.Update(0, crc32.IEEETable, hdr.Bytes())
	z := make([]byte, block)
	for left := int64(zeros); left > 0; left -= block {
		crc = crc32.Update(crc, crc32.IEEETable, z[:min(left, block)])
	}
	hugeT = binary.LittleEndian.AppendUint32(hugeT, crc)
	hugeT = binary.LittleEndian.AppendUint32(hugeT, uint32(int64(hdr.Len())+int64(zeros)))
	h := sha256.New()
	n, err := io.Copy(h, hugeBlobReader())
	if hugeErr = err; err == nil {
		hugeDigest, hugeBlobSize = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, n
	}
}

func hugeBlobReader() io.Reader {
	rs := []io.Reader{bytes.NewReader(hugeHead)}
	for range hugeMidCount {
		rs = append(rs, bytes.NewReader(hugeMid))
	}
	return io.MultiReader(append(rs, bytes.NewReader(hugeT))...)
}

func hugeBlob() (io.ReadCloser, error) { return io.NopCloser(hugeBlobReader()), nil }

// CorruptGzipLayer is a gzip layer whose deflate data is damaged (its
// digest matches the damaged bytes: only decompressing finds it).
func CorruptGzipLayer() (v1.Layer, error) {
	t, err := LayerTar([]TarEntry{{Name: "data.bin", Body: bytes.Repeat([]byte("codecage "), 8<<10)}})
	if err != nil {
		return nil, err
	}
	z := gzipBytes(t)
	for i := 12; i < 40 && i < len(z); i++ {
		z[i] = 0xff
	}
	return &rawLayer{blob: z, digest: sum(z), diffID: sum(t), mediaType: types.DockerLayer}, nil
}

// TruncatedTarLayer is a well-formed gzip of a tar cut inside a file.
func TruncatedTarLayer() (v1.Layer, error) {
	t, err := LayerTar([]TarEntry{{Name: "data.bin", Body: bytes.Repeat([]byte{7}, 64<<10)}})
	if err != nil {
		return nil, err
	}
	t = t[:len(t)/2]
	z := gzipBytes(t)
	return &rawLayer{blob: z, digest: sum(z), diffID: sum(t), mediaType: types.DockerLayer}, nil
}

// DigestMismatchLayer is a blob named by a digest it does not have (an
// OCI layout stores it under the wrong name).
func DigestMismatchLayer() (v1.Layer, error) {
	t, err := LayerTar([]TarEntry{{Name: "swapped.txt", Body: []byte("not what the manifest promised\n")}})
	if err != nil {
		return nil, err
	}
	z := gzipBytes(t)
	return &rawLayer{blob: z, digest: sum([]byte("another blob")), diffID: sum(t), mediaType: types.DockerLayer}, nil
}

// DiffIDMismatchLayer is a layer whose config diff ID is another tar's
// (what checks a docker archive, whose layers have no digest of their own).
func DiffIDMismatchLayer() (v1.Layer, error) {
	t, err := LayerTar([]TarEntry{{Name: "swapped.txt", Body: []byte("not what the config promised\n")}})
	if err != nil {
		return nil, err
	}
	z := gzipBytes(t)
	return &rawLayer{blob: z, digest: sum(z), diffID: sum([]byte("another tar")), mediaType: types.DockerLayer}, nil
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func sum(b []byte) v1.Hash {
	h := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h[:])}
}

// rawLayer is a layer given as its blob and the hashes it claims,
// whether or not they are true.
type rawLayer struct {
	blob      []byte
	open      func() (io.ReadCloser, error)
	size      int64
	digest    v1.Hash
	diffID    v1.Hash
	mediaType types.MediaType
}

func (l *rawLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *rawLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *rawLayer) MediaType() (types.MediaType, error) {
	return l.mediaType, nil
}

func (l *rawLayer) Size() (int64, error) {
	if l.open != nil {
		return l.size, nil
	}
	return int64(len(l.blob)), nil
}

func (l *rawLayer) Compressed() (io.ReadCloser, error) {
	if l.open != nil {
		return l.open()
	}
	return io.NopCloser(bytes.NewReader(l.blob)), nil
}

func (l *rawLayer) Uncompressed() (io.ReadCloser, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	if l.mediaType == types.DockerUncompressedLayer || l.mediaType == types.OCIUncompressedLayer {
		return rc, nil
	}
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return nil, fmt.Errorf("envfixture: %w", err)
	}
	return zr, nil
}

// DirArchive writes a docker-save tarball at out of an image whose one
// layer is the tree under dir: a root built here, packed as an image an
// operator would import.
func DirArchive(dir, out string) error {
	layer, err := LayerFromDir(dir)
	if err != nil {
		return err
	}
	img, err := Image(layer)
	if err != nil {
		return err
	}
	return WriteDockerArchive(out, img)
}
