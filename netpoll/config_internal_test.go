package netpoll

import (
	"errors"
	"testing"
)

// FuzzParseConfigMeaning: ParseConfig moves the keys that have a Config
// field into it and leaves the rest in Experiment; that must not change
// what the setting means. A group given ParseConfig(s) resolves to the
// same settings as one given s whole as its Experiment.
func FuzzParseConfigMeaning(f *testing.F) {
	for _, s := range []string{"", "shortread=on", "shortread=off", "shortread=default", "mode=et", "mode=default",
		"sharing=single", "sharing=default", "sharing=wakeall,pollers=3", "sharing=exclusive,spin=1ms",
		"spin=0", "spin=off", "spin=auto", "spin=forever,wait=block", "busypoll=0", "busypoll=50us",
		"pollers=default,wait=inline", "mode=level,sharing=reuseport,wait=inline,shortread=off"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig(s)
		if err != nil {
			return
		}
		got, err := c.settings()
		if err != nil {
			t.Fatalf("ParseConfig(%q) = %q, which does not resolve: %v", s, c, err)
		}
		want, err := Config{Experiment: s}.settings()
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Config{Experiment: %q}.settings(): %v, not a *ConfigError", s, err)
			}
			t.Fatalf("ParseConfig(%q) resolves, but as an Experiment it is refused: %v", s, err)
		}
		if got != want {
			t.Fatalf("ParseConfig(%q) = %q resolves to %+v; as an Experiment, %+v", s, c, got, want)
		}
	})
}
