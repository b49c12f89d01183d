// Package testtool decides what a test does when a tool it needs (wrk, a C
// compiler) is missing: skip on a developer's machine, fail under CI, where
// .ci/run installs every such tool, so that a green CI run cannot hide a
// test that never ran.
package testtool

import (
	"os"
	"testing"
)

// Missing ends t because tool is unavailable (err says why): t.Fatal when
// the CI environment variable is set, t.Skip otherwise.
func Missing(t testing.TB, tool string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing and CI is set (.ci/run installs it): %v", tool, err)
		return // Fatalf does not return in a test; a fake TB's may
	}
	t.Skipf("%s is missing (CI would fail here): %v", tool, err)
}
