package testtool

import (
	"errors"
	"testing"
)

// fakeTB records how Missing ended the test.
type fakeTB struct {
	testing.TB
	fatal, skip bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Fatalf(string, ...any) { f.fatal = true }
func (f *fakeTB) Skipf(string, ...any)  { f.skip = true }

func TestMissing(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		f := &fakeTB{}
		Missing(f, "wrk", errors.New("not found"))
		if want := ci != ""; f.fatal != want || f.skip == want {
			t.Errorf("CI=%q: fatal=%v skip=%v, want fatal=%v", ci, f.fatal, f.skip, want)
		}
	}
}
