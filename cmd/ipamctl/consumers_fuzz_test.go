package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// dupKey returns a key that some object of the JSON document data holds
// twice, compared as encoding/json matches struct fields (case folded),
// or "" for none.
func dupKey(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.key {
			// As encoding/json matches keys: Unicode's simple folding.
			for k := range top.keys {
				if strings.EqualFold(k, s) {
					return s
				}
			}
			top.keys[s] = true
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // a value was read: a key comes next
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = true
			}
		}
	}
}

// FuzzParseConsumersKeepsEveryClaim: a --consumers file that parseConsumers
// accepts says one thing. decodeStrict refuses unknown keys because an
// owner read as holding nothing has its records deleted by repair; a key
// given twice ("addresses", or "Addresses", which encoding/json matches
// too) is the same hazard: the last one silently wins. So an accepted file
// has no object with a key twice, and each owner holds the addresses its
// entry lists.
func FuzzParseConsumersKeepsEveryClaim(f *testing.F) {
	f.Add([]byte(`[{"parentRef":"services/default/x","addresses":["10.96.0.1"]}]`))
	f.Add([]byte(`[{"parentRef":"services/default/x","addresses":["10.96.0.1"],"addresses":[]}]`))
	f.Add([]byte(`[{"parentRef":"services/default/x","addresses":["10.96.0.1"],"Addresses":[]}]`))
	f.Add([]byte(`[{"parentRef":{"resource":"services","name":"x","Name":"y"},"addresses":[]}]`))
	f.Add([]byte(`[{"parentRef":"services/default/x","parentRef":"services/default/y","addresses":[]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		consumers, err := parseConsumers("fuzz.json", data)
		if err != nil {
			return
		}
		if k := dupKey(data); k != "" {
			t.Fatalf("%s: accepted with the key %q given twice in one object: read as %+v", data, k, consumers)
		}
		// Each owner's addresses are its entry's list, as given.
		var entries []map[string]json.RawMessage
		if err := json.Unmarshal(data, &entries); err != nil || len(entries) != len(consumers) {
			t.Fatalf("%s: accepted as %d consumers; the document holds %d entries (%v)", data, len(consumers), len(entries), err)
		}
		for i, e := range entries {
			var raw json.RawMessage
			for k, v := range e {
				if strings.EqualFold(k, "addresses") {
					raw = v
				}
			}
			var addrs []string
			if err := json.Unmarshal(raw, &addrs); err != nil {
				t.Fatalf("%s: entry %d accepted; its addresses %s: %v", data, i, raw, err)
			}
			if dupKey(data) == "" && !slices.Equal(addrs, consumers[i].Addrs) {
				t.Fatalf("%s: entry %d lists %q, read as %q", data, i, addrs, consumers[i].Addrs)
			}
		}
	})
}

// TestConsumersWithAKeyTwice: each file below names an owner's addresses
// twice, or its name twice; parseConsumers took the last one silently,
// and repair then deleted the records of the addresses (or the owner) the
// first one named. Such a file is refused.
func TestConsumersWithAKeyTwice(t *testing.T) {
	for _, in := range []string{
		`[{"parentRef":"services/default/x","addresses":["10.96.0.1"],"addresses":[]}]`,
		`[{"parentRef":"services/default/x","addresses":["10.96.0.1"],"Addresses":[]}]`,
		`[{"parentRef":{"resource":"services","name":"x","Name":"y"},"addresses":["10.96.0.1"]}]`,
	} {
		if c, err := parseConsumers("consumers.json", []byte(in)); err == nil {
			t.Errorf("%s: accepted as %+v, want a usage error", in, c)
		}
	}
}

// TestRepairWithAKeyTwiceDeletesARecord is TestConsumersWithAKeyTwice end
// to end: repair, given a consumers file whose owner lists its address and
// then, under the same key, nothing, deleted the owner's record; the file
// is now refused and the record stays.
func TestRepairWithAKeyTwiceDeletesARecord(t *testing.T) {
	db := t.TempDir() + "/ipam.db"
	ipamctl := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(t.Context(), append([]string{"--db", db}, args...), strings.NewReader(stdin), &out, &errb)
		return code, out.String() + errb.String()
	}
	for _, args := range [][]string{
		{"cidr", "create", "kubernetes", "10.96.0.0/24"},
		{"ip", "allocate", "10.96.0.10", "--parent", "services/default/x"},
	} {
		if code, out := ipamctl("", args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, out)
		}
	}
	file := `[{"parentRef":"services/default/x","addresses":["10.96.0.10"],"addresses":[]}]`
	code, out := ipamctl(file, "repair", "--consumers", "-", "--leak-grace", "0s")
	t.Logf("repair: exit %d: %s", code, out)
	if code, out := ipamctl("", "ip", "get", "10.96.0.10"); code != 0 {
		t.Errorf("after repair with %s: ip get: exit %d: %s", file, code, out)
	}
}
