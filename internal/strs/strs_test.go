package strs

import (
	"strings"
	"testing"
)

// Same is ==, whether or not the strings share their bytes.
func TestSameIsEquality(t *testing.T) {
	base := "services/default"
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{base, base, true},                               // the same bytes
		{base, strings.Clone(base), true},                // equal bytes elsewhere
		{base[:8], base, false},                          // a shared prefix, shorter
		{base[:8], base[:8], true},                       //
		{"services", "servicez", false},                  // same length, other bytes
		{base[:8], strings.Clone(base[:7]) + "z", false}, //
		{"", "", true},                                   //
		{"", base[:0], true},                             // empty, with a pointer
		{base[8:9], "/", true},                           //
	} {
		if got := Same(c.a, c.b); got != c.want || got != (c.a == c.b) {
			t.Errorf("Same(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
