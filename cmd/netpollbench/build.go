package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/edgepoll/edgepoll/bench/cref"
)

// moduleRoot finds the edgepoll module's directory from the working one.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/edgepoll/edgepoll\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run netpollbench inside the edgepoll repository (no go.mod for github.com/edgepoll/edgepoll above the working directory)")
		}
		dir = parent
	}
}

// build compiles the binaries the chosen servers need into bin and returns
// their paths. The C reference is dropped, with a message, when there is
// no C compiler; every other failure is an error. http adds cmd/httpserver
// (for each toolchain used). The runtime's configurations are built with
// the patched toolchain in rtGoroot, the before configurations' from
// commit before, by the same Go release as the working tree's echoserver.
func build(ctx context.Context, root, bin string, srvs []server, herd, http bool, rtGoroot string, before beforeCommit,
	stderr io.Writer) (map[string]string, []server, []string, error) {
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, nil, nil, err
	}
	bins := map[string]string{}
	goBuildWith := func(goroot, dir, pkg, name string, flags ...string) error {
		if _, ok := bins[name]; ok {
			return nil
		}
		out := filepath.Join(bin, name)
		gocmd := "go"
		if goroot != "" {
			gocmd = filepath.Join(goroot, "bin", "go")
		}
		cmd := exec.CommandContext(ctx, gocmd, append(append([]string{"build"}, flags...), "-o", out, pkg)...)
		cmd.Dir = dir
		if goroot != "" {
			cmd.Env = append(os.Environ(), "GOROOT="+goroot, "GOTOOLCHAIN=local")
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
		}
		bins[name] = out
		return nil
	}
	goBuild := func(dir, pkg, name string, flags ...string) error { return goBuildWith("", dir, pkg, name, flags...) }
	fmt.Fprintln(stderr, "netpollbench: building servers, load generator and herd")
	if err := goBuild(root, "./cmd/loadgen", "loadgen"); err != nil {
		return nil, nil, nil, err
	}
	if herd {
		if err := goBuild(root, "./cmd/herd", "herd"); err != nil {
			return nil, nil, nil, err
		}
	}
	if http {
		if err := goBuild(root, "./cmd/httpserver", "httpserver"); err != nil {
			return nil, nil, nil, err
		}
		if rtGoroot != "" {
			if err := goBuildWith(rtGoroot, root, "./cmd/httpserver", "httpserver-rt"); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	var kept []server
	var skipped []string
	for _, s := range srvs {
		var err error
		switch s.bin {
		case "echoserver":
			err = goBuild(root, "./cmd/echoserver", s.bin)
		case beforeBin:
			switch path := filepath.Join(bin, s.bin); {
			case bins[s.bin] != "": // built for another before configuration
			case before.rev == "":
				err = errors.New(s.name + ": no -before commit to build it from")
			default:
				fmt.Fprintf(stderr, "netpollbench: building cmd/echoserver at %s\n", before)
				if err = buildBefore(ctx, root, before, path); err == nil {
					bins[s.bin] = path
				}
			}
		case "echoserver-rt":
			if rtGoroot == "" {
				err = errors.New(s.name + ": the patched toolchain is not built (runtime_patch/build.sh)")
				break
			}
			err = goBuildWith(rtGoroot, root, "./cmd/echoserver", s.bin)
		case "gnetecho":
			// As gnet's own benchmark builds it (bench/peers/README.md).
			err = goBuild(filepath.Join(root, "bench", "peers"), "./cmd/"+s.bin, s.bin, "-tags=poll_opt")
		case "nbioecho", "cloudwegoecho":
			err = goBuild(filepath.Join(root, "bench", "peers"), "./cmd/"+s.bin, s.bin)
		case "cref":
			var path string
			if path, err = cref.Build(bin); err == nil {
				bins[s.bin] = path
			} else if errors.Is(err, cref.ErrNoCompiler) {
				fmt.Fprintf(stderr, "netpollbench: %v\n", err)
				skipped = append(skipped, fmt.Sprintf("%s: %v", s.name, err))
				continue
			}
		default:
			err = fmt.Errorf("no build rule for %s", s.bin)
		}
		if err != nil {
			return nil, nil, nil, err
		}
		kept = append(kept, s)
	}
	if bins[beforeBin] != "" && bins["echoserver"] != "" {
		if err := sameToolchain(bins[beforeBin], bins["echoserver"]); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(kept) == 0 {
		return nil, nil, nil, errors.New("no configuration left to run: " + strings.Join(skipped, "; "))
	}
	return bins, kept, skipped, nil
}
