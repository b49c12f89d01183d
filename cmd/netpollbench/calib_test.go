package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCalibrate measures the machine and checks the figures are there and
// plausible (positive, finite), and that they round-trip through the
// configuration lines -compare reads.
func TestCalibrate(t *testing.T) {
	c, err := calibrate("test")
	if err != nil {
		t.Fatal(err)
	}
	if c.syscallNs <= 0 || c.sameCoreUs <= 0 || (c.ncpu >= 2 && c.crossCoreUs <= 0) {
		t.Fatalf("calibration %+v has a figure missing", c)
	}
	var b bytes.Buffer
	c.writeConfig(&b, "calib-")
	back := readCalib(b.Bytes(), "calib-")
	for k, v := range c.figures() {
		if w := back[k]; w <= 0 || w/v > 1.01 || v/w > 1.01 {
			t.Errorf("%s: wrote %v, read back %v", k, v, w)
		}
	}
	if !strings.Contains(b.String(), "calib-cpu: ") || !strings.Contains(b.String(), "calib-kernel: ") {
		t.Errorf("configuration lines lack cpu or kernel:\n%s", b.String())
	}
	t.Log(c)
}

func TestMoved(t *testing.T) {
	a := map[string]float64{"syscall-ns": 100, "same-core-wakeup-roundtrip-us": 5, "cross-core-wakeup-roundtrip-us": 10}
	b := map[string]float64{"syscall-ns": 125, "same-core-wakeup-roundtrip-us": 7, "cross-core-wakeup-roundtrip-us": 25}
	got := moved(a, b, calibMovedFraction)
	if len(got) != 2 || !strings.HasPrefix(got[0], "same-core") || !strings.HasPrefix(got[1], "cross-core") {
		t.Errorf("moved by 30%%: %q, want same-core and cross-core", got)
	}
	if got := moved(a, b, calibCompareFactor-1); len(got) != 1 || !strings.HasPrefix(got[0], "cross-core") {
		t.Errorf("moved by 2x: %q, want cross-core", got)
	}
	if got := moved(a, map[string]float64{}, 0.3); len(got) != 0 {
		t.Errorf("against nothing: %q", got)
	}
}
