package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The code before a change, measured in the same run (-before REF): the
// configuration "before" is netpoll's default (defaultCfg) served by
// cmd/echoserver built from the commit REF names, and "before-NAME" is
// echoserver's configuration NAME served so. They join the cells, the
// open-loop sweep (swept) and the idle experiment their counterparts
// join, but net/http's and the quota cell's, so each round measures both
// in a random order and the verdict pairs them within rounds as it pairs
// any configuration with package net (judgeCell): the change's cost, with
// the host's drift between rounds cancelled.

// beforeBin is the binary of the before configurations.
const beforeBin = "echoserver-before"

// beforeRevLen is how much of the commit's hash the labels and the
// summary show.
const beforeRevLen = 12

// beforeBase returns the configuration a before configuration's name
// serves, and whether name is one: "before" is the default's,
// "before-NAME" NAME's for any other NAME.
func beforeBase(name string) (string, bool) {
	if name == "before" {
		return defaultCfg, true
	}
	base, ok := strings.CutPrefix(name, "before-")
	return base, ok && base != defaultCfg && base != ""
}

// isBefore reports whether name is a before configuration.
func isBefore(name string) bool {
	_, ok := beforeBase(name)
	return ok
}

// beforeName is the before configuration that pairs with cfg: "before"
// for the default, "before-"+cfg for the others, "" for a before
// configuration itself.
func beforeName(cfg string) string {
	switch {
	case isBefore(cfg):
		return ""
	case cfg == defaultCfg:
		return "before"
	}
	return "before-" + cfg
}

// beforeServer is s served by the before binary: its name, s's flags and
// labels but cfg (bench adds rev= once the commit is known).
func beforeServer(s server) server {
	name := beforeName(s.name)
	return server{name: name, label: "cfg=" + name + strings.TrimPrefix(s.label, "cfg="+s.name), bin: beforeBin,
		args: slices.Clone(s.args), env: slices.Clone(s.env)}
}

// pickBefore resolves a before configuration's name among the echoserver
// configurations of all.
func pickBefore(name string, all []server) (server, bool) {
	base, ok := beforeBase(name)
	if !ok {
		return server{}, false
	}
	i := slices.IndexFunc(all, func(s server) bool { return s.name == base && s.bin == "echoserver" })
	if i < 0 {
		return server{}, false
	}
	return beforeServer(all[i]), true
}

// beforeCommit is the commit the before configurations were built from.
type beforeCommit struct {
	ref, rev string // as given to -before, and its full hash
}

func (c beforeCommit) String() string {
	if c.ref == c.rev || strings.HasPrefix(c.rev, c.ref) {
		return c.rev[:beforeRevLen]
	}
	return fmt.Sprintf("%s (%s)", c.ref, c.rev[:beforeRevLen])
}

// resolveBefore resolves ref to a commit of the repository at root, with
// an error that names the flag and says what git could not do.
func resolveBefore(ctx context.Context, root, ref string) (beforeCommit, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil {
		return beforeCommit{ref: ref, rev: strings.TrimSpace(string(out))}, nil
	}
	// --quiet: a name that is no commit exits 1 and says nothing; git
	// says why anything else failed (not a repository, ...).
	why := strings.TrimPrefix(firstLine(strings.TrimSpace(stderr.String())), "fatal: ")
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 1 && why == "":
		why = "unknown revision (no commit of that name in " + root + ")"
	case why == "":
		why = err.Error()
	}
	return beforeCommit{}, fmt.Errorf("-before %s: git: %s", ref, why)
}

// buildBefore builds cmd/echoserver from commit c of the repository at
// root into path: git archive extracts the commit's tree into a temporary
// directory, removed before buildBefore returns, and go builds it there
// with the module cache the working tree's build uses.
func buildBefore(ctx context.Context, root string, c beforeCommit, path string) error {
	dir, err := os.MkdirTemp("", "netpollbench-before-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := extractTree(ctx, root, c.rev, dir); err != nil {
		return fmt.Errorf("-before %s: %w", c, err)
	}
	// No VCS stamp: the tree is outside any repository, or, under a
	// TMPDIR inside one, in someone else's.
	cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", path, "./cmd/echoserver")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("-before %s: building ./cmd/echoserver at that commit: %v\n%s", c, err, b)
	}
	return nil
}

// extractTree writes the tree of commit rev of the repository at root
// into dir.
func extractTree(ctx context.Context, root, rev, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", rev)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git archive: %w", err)
	}
	uerr := untar(out, dir)
	io.Copy(io.Discard, out) // git exits once its output is read
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return uerr
}

// untar writes the directories, files and symbolic links of the tar
// stream r under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir, tar.TypeReg, tar.TypeSymlink:
		default:
			continue // git's pax header holding the commit id
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("archive entry %q is outside the tree", h.Name)
		}
		p := filepath.Join(dir, h.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, h.FileInfo().Mode().Perm()); err == nil {
				_, err = io.Copy(f, tr)
				err = errors.Join(err, f.Close())
			}
		}
		if err != nil {
			return err
		}
	}
}

// sameToolchain checks that the before binary and the working tree's
// echoserver were built by one Go release: a pair built by two would
// measure the compiler and runtime beside the change.
func sameToolchain(before, now string) error {
	b, err := buildinfo.ReadFile(before)
	if err != nil {
		return err
	}
	n, err := buildinfo.ReadFile(now)
	if err != nil {
		return err
	}
	if b.GoVersion != n.GoVersion {
		return fmt.Errorf("-before: the commit's echoserver was built by %s and the working tree's by %s (the go and toolchain lines of "+
			"their go.mod differ, GOTOOLCHAIN=%s): the pair would compare toolchains too; set GOTOOLCHAIN=local", b.GoVersion, n.GoVersion, os.Getenv("GOTOOLCHAIN"))
	}
	return nil
}

// beforePair is a configuration against its before configuration in a
// cell, paired within rounds on CPU per request and on req/s, whatever
// measure decides the cell: the change's cost is its CPU, its benefit
// may be either. In the idle cell, one sample each, it is their memory
// per connection instead.
type beforePair struct {
	before    string // the before configuration's name
	cpu, rate comparison
	mem       *comparison // the idle cell's; nil in the others
}

// judgeBefore pairs cfg with its before configuration in series (cfg ->
// unit -> by round) of a cell decided on m, one sample each if one; nil
// when the cell has no such pair. A cell of one round decided on memory
// is the idle experiment's; any other (a run of -rounds 1) still pairs
// CPU per request and req/s, from their one sample.
func judgeBefore(series map[string]map[string][]float64, cfg string, m measure, one bool) *beforePair {
	b := beforeName(cfg)
	if b == "" || series[b] == nil || series[cfg] == nil {
		return nil
	}
	if one && m.unit == byMemory.unit {
		c := compare(series[cfg][m.unit], series[b][m.unit])
		c.oneSample = true
		return &beforePair{before: b, mem: &c}
	}
	p := &beforePair{before: b,
		cpu:  compare(series[cfg][byCPU.unit], series[b][byCPU.unit]),
		rate: compare(series[cfg][byThroughput.unit], series[b][byThroughput.unit])}
	p.cpu.oneSample, p.rate.oneSample = one, one
	return p
}

// beforeCounts is the verdict of cfg against its before configuration on
// CPU per request, counted over the cells, as "level in 3 (echo, 1 conn;
// ...), unresolved in 1 (...)"; "" when no cell pairs them.
func beforeCounts(vs []cellVerdict, cfg string) string {
	count := map[string][]string{}
	for _, v := range vs {
		if r := v.row(cfg); r != nil && r.vsBefore != nil && r.vsBefore.mem == nil {
			w := r.vsBefore.cpu.verdict(byCPU.higherBetter)
			count[w] = append(count[w], v.cp.short())
		}
	}
	var parts []string
	for _, w := range []string{verdictWins, verdictLevel, verdictLoses, verdictUnresolved} {
		if cs := count[w]; len(cs) > 0 {
			parts = append(parts, fmt.Sprintf("%s in %d (%s)", w, len(cs), strings.Join(cs, "; ")))
		}
	}
	return strings.Join(parts, ", ")
}

// beforeNote is the verdict's line on the code before: the default's CPU
// per request against it; "" without the before configuration.
func beforeNote(t *table, vs []cellVerdict) string {
	if t.before.rev == "" {
		return ""
	}
	if c := beforeCounts(vs, defaultCfg); c != "" {
		return fmt.Sprintf("Against the code before (%s, -before), the default's CPU per request %s.", t.before, c)
	}
	return ""
}

// capitalize is s with its first letter upper case.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// beforeBlock tabulates every configuration against its before
// configuration, cell by cell, and in the idle experiment; nil when the
// run has no before configuration.
func beforeBlock(t *table, vs []cellVerdict) *block {
	if t.before.rev == "" {
		return nil
	}
	b := &block{id: "before", title: "Against the code before: each configuration over the same served by cmd/echoserver built from " + t.before.String(),
		notes: []string{fmt.Sprintf("before is %s so built, before-NAME is NAME; both of a pair run in the same rounds, in a random order.", defaultCfg)},
		head:  []string{"cell", "config", "vs before, CPU/req", "vs before, req/s"}, left: 2, indent: "  "}
	var cfgs []string
	for _, v := range vs {
		for _, r := range v.rows {
			switch {
			case r.vsBefore == nil:
				continue
			case r.vsBefore.mem != nil:
				// Idle memory: one sample each, as in the verdict.
				bf := v.row(r.vsBefore.before)
				b.foot = append(b.foot, fmt.Sprintf("%s: %s %.2f KiB/conn as-is against %s %.2f: %s.", capitalize(v.cp.short()),
					r.cfg, r.med[byMemory.unit]/1024, bf.cfg, bf.med[byMemory.unit]/1024, compact(r.vsBefore.mem, byMemory)))
				continue
			}
			b.rows = append(b.rows, []string{v.cp.short(), r.cfg,
				compact(&r.vsBefore.cpu, byCPU), compact(&r.vsBefore.rate, byThroughput)})
			if !slices.Contains(cfgs, r.cfg) {
				cfgs = append(cfgs, r.cfg)
			}
		}
	}
	for _, cfg := range cfgs {
		b.notes = append(b.notes, fmt.Sprintf("%s against %s, CPU per request: %s.", cfg, beforeName(cfg), beforeCounts(vs, cfg)))
	}
	if len(b.rows) == 0 {
		b.notes = append(b.notes, fmt.Sprintf("No cell measured a configuration beside its before configuration: before pairs with %s, "+
			"before-NAME with NAME; name both in -configs.", defaultCfg))
	}
	b.foot = append(b.foot, "Ratios: the configuration's figure over its before configuration's, paired within rounds as in the verdict; "+
		"a CPU/req ratio under 1 is less CPU per request, a req/s ratio over 1 more requests per second. "+
		"Both binaries are built by the same Go release from their own trees.")
	return b
}
