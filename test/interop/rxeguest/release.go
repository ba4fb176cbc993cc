package rxeguest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Release is the Debian release a guest image is made of.
type Release struct {
	// Suite is a Debian suite (trixie), or "" for the host's own package
	// sources (bookworm on this project's hosts).
	Suite string
	// KernelSuite, if set, is the suite the kernel comes from instead
	// (trixie-backports), the rest of the image staying Suite's.
	KernelSuite string
}

// Trixie is Debian 13: Linux 6.12, whose rxe has IBTA 1.5 ATOMIC_WRITE
// and FLUSH, and rdma-core 56.
var Trixie = Release{Suite: "trixie"}

// TrixieBackportsKernel is Debian 13 with trixie-backports' kernel, whose
// virtio-net offers AF_XDP zero-copy (Linux 6.13 and later: 6.12's
// driver does not advertise xsk-zerocopy, so the kernel binds copy mode).
var TrixieBackportsKernel = Release{Suite: "trixie", KernelSuite: "trixie-backports"}

// kernelMeta is the kernel metapackage to resolve in r: of KernelSuite
// if r has one.
func (r Release) kernelMeta() string {
	if r.KernelSuite != "" {
		return kernelMetaPackage + "/" + r.KernelSuite
	}
	return kernelMetaPackage
}

// renamed are the image's packages under another name in a suite (the
// 64-bit time_t transition renamed libraries in trixie).
var renamed = map[string]map[string]string{
	"trixie": {"libelf1": "libelf1t64", "librdmacm1": "librdmacm1t64"},
}

// dropped are the image's packages a suite's image goes without: trixie's
// UCX links Open MPI and ROCm, which would pull in many more, and the
// middleware's interop runs on the host's release.
var dropped = map[string]map[string]bool{
	"trixie": {"ucx-utils": true, "libucx0": true},
}

// added are packages a suite's image needs besides: libraries its tools
// link that the host release's did not.
var added = map[string][]string{
	"trixie": {"libselinux1", "libpcre2-8-0"},
}

// packages are the image's packages in r.
func (r Release) packages() []string {
	var pkgs []string
	for _, p := range imagePackages {
		if dropped[r.Suite][p] {
			continue
		}
		if n, ok := renamed[r.Suite][p]; ok {
			p = n
		}
		pkgs = append(pkgs, p)
	}
	return append(pkgs, added[r.Suite]...)
}

// apt runs apt-get and apt-cache on r's package lists: the host's, or
// for another suite a private state under dir (lists, cache and an empty
// dpkg status), from the mirror the host's own sources name.
type apt struct {
	opts   []string
	kernel string // the kernel metapackage (Release.kernelMeta)
}

func (r Release) apt(ctx context.Context, dir string) (*apt, error) {
	if r.Suite == "" {
		return &apt{kernel: r.kernelMeta()}, nil
	}
	uri, keyring, err := hostMirror()
	if err != nil {
		return nil, err
	}
	state := filepath.Join(dir, "apt-"+r.Suite)
	if r.KernelSuite != "" {
		state += "+" + r.KernelSuite
	}
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			return nil, err
		}
	}
	list := filepath.Join(state, "sources.list")
	line := fmt.Sprintf("deb [signed-by=%s] %s %s main\n", keyring, uri, r.Suite)
	if r.KernelSuite != "" {
		line += fmt.Sprintf("deb [signed-by=%s] %s %s main\n", keyring, uri, r.KernelSuite)
	}
	if err := os.WriteFile(list, []byte(line), 0o644); err != nil {
		return nil, err
	}
	status := filepath.Join(state, "status")
	if err := os.WriteFile(status, nil, 0o644); err != nil {
		return nil, err
	}
	a := &apt{opts: []string{"-o", "Dir::Etc::SourceList=" + list, "-o", "Dir::Etc::SourceParts=" + filepath.Join(state, "none"),
		"-o", "Dir::State::Lists=" + filepath.Join(state, "lists"), "-o", "Dir::Cache=" + filepath.Join(state, "cache"),
		"-o", "Dir::State::Status=" + status}, kernel: r.kernelMeta()}
	if _, err := a.run(ctx, "", "apt-get", "update"); err != nil {
		return nil, fmt.Errorf("package lists of %s: %w", r.Suite, err)
	}
	return a, nil
}

func (a *apt) run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	return run(ctx, dir, name, append(append([]string{}, a.opts...), args...)...)
}

// hostMirror is the Debian archive the host's apt sources name (deb822
// .sources files or sources.list), with the keyring they are signed by.
func hostMirror() (uri, keyring string, err error) {
	keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range append(files, "/etc/apt/sources.list") {
		if u := mirrorIn(f); u != "" {
			return u, keyring, nil
		}
	}
	return "", "", fmt.Errorf("no Debian archive in the host's apt sources")
}

// mirrorIn is the first URI of file that serves Debian's main archive (not
// its security archive), or "".
func mirrorIn(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		var u string
		switch {
		case len(fields) >= 2 && fields[0] == "URIs:":
			u = fields[1]
		case len(fields) >= 3 && fields[0] == "deb":
			u = fields[1]
			if strings.HasPrefix(u, "[") {
				for i := 1; i < len(fields); i++ {
					if strings.HasSuffix(fields[i], "]") && i+1 < len(fields) {
						u = fields[i+1]
						break
					}
				}
			}
		}
		if u != "" && strings.Contains(u, "debian") && !strings.Contains(u, "security") {
			return u
		}
	}
	return ""
}
