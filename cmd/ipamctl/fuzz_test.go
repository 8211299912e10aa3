package main

import (
	"errors"
	"testing"
)

// FuzzParseConsumers: the --consumers decoder never panics, refuses bad
// input as a usage error, and returns only valid owners.
func FuzzParseConsumers(f *testing.F) {
	f.Add([]byte(`[{"parentRef": "services/default/x", "addresses": ["10.96.0.1"]}]`))
	f.Add([]byte(`[{"parentRef": {"resource": "services", "namespace": "default", "name": "x"}, "addresses": ["fd00::1", "bad"]}]`))
	f.Add([]byte(`[{"parentRef": 7}]`))
	f.Add([]byte(`[{"parentRef": "services/x", "address": ["10.96.0.1"]}]`))
	f.Add([]byte(`[{"parentRef": "services/x", "addresses": []}] [1]`))
	f.Add([]byte(`{}`))
	f.Add([]byte(` null `))
	f.Add([]byte(`[null]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		consumers, err := parseConsumers("fuzz.json", data)
		if err == nil && consumers == nil {
			t.Fatalf("%q: no error and no list: read as no consumers", data)
		}
		if err != nil {
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("error %v is not a usage error", err)
			}
			return
		}
		for _, c := range consumers {
			if verr := c.Ref.Validate(); verr != nil {
				t.Fatalf("accepted an invalid owner %+v: %v", c.Ref, verr)
			}
		}
	})
}
