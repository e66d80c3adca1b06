// Command mkimage packs one static binary into a single-layer OCI image and
// writes it as a docker-archive tarball that `ctr images import` accepts.
// It exists because no container registry is reachable from the e2e hosts.
//
//	mkimage -bin ./pause -name registry.k8s.io/pause:codecage -o pause.tar
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	bin := flag.String("bin", "", "static binary to put at /<basename>")
	ref := flag.String("name", "", "image reference, e.g. codecage.local/x:tag")
	out := flag.String("o", "", "output tarball")
	flag.Parse()
	if *bin == "" || *ref == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	data, err := os.ReadFile(*bin)
	if err != nil {
		log.Fatal(err)
	}
	base := filepath.Base(*bin)

	// Layer: the binary plus /tmp, so programs that want a temp dir work.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	must(tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 01777, ModTime: epoch}))
	must(tw.WriteHeader(&tar.Header{Name: base, Typeflag: tar.TypeReg, Mode: 0755, Size: int64(len(data)), ModTime: epoch}))
	_, err = tw.Write(data)
	must(err)
	must(tw.Close())
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	must(err)

	img, err := mutate.AppendLayers(empty.Image, layer)
	must(err)
	cf, err := img.ConfigFile()
	must(err)
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/" + base}
	cf.Config.Env = []string{"PATH=/"}
	img, err = mutate.ConfigFile(img, cf)
	must(err)

	tag, err := name.NewTag(*ref)
	must(err)
	must(tarball.WriteToFile(*out, tag, img))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
