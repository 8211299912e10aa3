package legacyip

import (
	"net/netip"
	"strings"
	"testing"
)

// The spellings below are what Kubernetes' ParseIPSloppy (k8s.io/utils/net,
// v0.34.2's dependency) was seen to read them as; "" for a refusal.
func TestWithoutLeadingZerosReadsWhatTheLegacyParsersRead(t *testing.T) {
	for s, want := range map[string]string{
		"010.001.002.003":       "10.1.2.3",
		"10.0.0.0":              "10.0.0.0",
		"0000000010.0.0.1":      "10.0.0.1",
		"2001:db8::00001":       "2001:db8::1",
		"fd00:10::0000a":        "fd00:10::a",
		"00000fd00::5":          "fd00::5",
		"FD00::00005":           "fd00::5",
		"::ffff:010.1.2.3":      "::ffff:10.1.2.3",
		"0::00000:1.2.3.04":     "::1.2.3.4",
		"::":                    "::",
		"fd00::10000":           "", // over 0xffff
		"256.1.1.1":             "",
		"1000.1.1.1":            "",
		"1.2.3":                 "",
		"1.2.3.4.5":             "",
		"fd00::1%eth0":          "",
		"fd00::g":               "",
		"1.2.3.-4":              "",
		"fd00::1.2.3":           "",
		"":                      "",
		"2001:0db8:0:0:0:0:0:1": "2001:db8::1",
	} {
		got, ok := WithoutLeadingZeros(s)
		var a netip.Addr
		if ok {
			var err error
			if a, err = netip.ParseAddr(got); err != nil {
				ok = false
			}
		}
		switch {
		case want == "" && ok:
			t.Errorf("WithoutLeadingZeros(%q) = %q, which parses to %v; the legacy parsers refused it", s, got, a)
		case want != "" && (!ok || a != netip.MustParseAddr(want)):
			t.Errorf("WithoutLeadingZeros(%q) = %q, %v; want an address equal to %s", s, got, ok, want)
		}
	}
}

// FuzzWithoutLeadingZeros: never a panic; the result is stripped (applying
// it again changes nothing) and keeps every ':' and '.' of s; and an address
// netip reads already is read the same after it.
func FuzzWithoutLeadingZeros(f *testing.F) {
	for _, s := range []string{"010.1.2.3", "2001:db8::00001", "::ffff:1.2.3.04", "fd00::", "0:0:0:0:0:0:0:0", "1.2.3.4", "fd00::1%eth0", "::00000:1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := WithoutLeadingZeros(s)
		if !ok {
			return
		}
		if again, ok := WithoutLeadingZeros(got); !ok || again != got {
			t.Fatalf("WithoutLeadingZeros(%q) = %q, but again = %q, %v", s, got, again, ok)
		}
		for _, sep := range []string{":", "."} {
			if strings.Count(got, sep) != strings.Count(s, sep) {
				t.Fatalf("WithoutLeadingZeros(%q) = %q: the %q changed", s, got, sep)
			}
		}
		if a, err := netip.ParseAddr(s); err == nil {
			if b, err := netip.ParseAddr(got); err != nil || b != a {
				t.Fatalf("WithoutLeadingZeros(%q) = %q, read as %v, %v; want %v", s, got, b, err, a)
			}
		}
	})
}
