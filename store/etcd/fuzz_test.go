package etcd

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// checkCorrupt fails unless err is a *CorruptError naming key.
func checkCorrupt(t *testing.T, err error, key string) {
	t.Helper()
	var ce *CorruptError
	if !errors.Is(err, store.ErrCorrupt) || !errors.As(err, &ce) || ce.Key != key || !strings.Contains(err.Error(), strconv.Quote(key)) {
		t.Fatalf("error %v: want a *CorruptError naming %q", err, key)
	}
}

func FuzzCIDRValue(f *testing.F) {
	f.Add(encodeCIDR(cidrset.CIDR{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/28")}, Created: time.Unix(1, 2)}))
	f.Add(encodeCIDR(cidrset.CIDR{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00:10::/108")}, Terminating: true}))
	f.Add([]byte(`{"v":2,"prefixes":[]}`))
	f.Add([]byte(`{"v":1,"prefixes":["10.0.0.1/33"]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`garbage`))
	f.Add([]byte(`{"v":1,"prefixes":["10.0.0.1/24","::ffff:10.0.0.0/104","10.0.0.1/24"],"created":0}`))
	f.Add([]byte(`{"v":1,"prefixes":["2001:DB8::/32"],"terminating":false,"created":-0,"x":null}`))
	f.Add([]byte(`{"V":1,"prefixes":["10.0.0.0\/8"],"prefixes":[],"created":0} `))
	const key = "/p/v1/cidrs/x"
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := cidrFromKV(key, "x", b, 7)
		if err != nil {
			checkCorrupt(t, err, key)
			return
		}
		if c.Name != "x" || c.Revision != 7 {
			t.Fatalf("decoded %+v", c)
		}
		enc := encodeCIDR(c)
		// What is read is what was written: a value the store would write
		// otherwise is no value it wrote, and must be refused.
		if !bytes.Equal(enc, b) {
			t.Fatalf("%q read as %+v, which is stored as %s", b, c, enc)
		}
		again, err := cidrFromKV(key, "x", enc, 7)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !equalCIDR(c, again) || !bytes.Equal(encodeCIDR(again), enc) {
			t.Fatalf("round trip of %q: %+v then %+v", b, c, again)
		}
	})
}

func equalCIDR(a, b cidrset.CIDR) bool {
	if a.Name != b.Name || a.Terminating != b.Terminating || !a.Created.Equal(b.Created) || a.Revision != b.Revision || len(a.Prefixes) != len(b.Prefixes) {
		return false
	}
	for i := range a.Prefixes {
		if a.Prefixes[i] != b.Prefixes[i] {
			return false
		}
	}
	return true
}

func FuzzRecordValue(f *testing.F) {
	f.Add(encodeRecord(ipaddress.IPAddress{Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}, Created: time.Unix(0, 5)}))
	f.Add(encodeRecord(ipaddress.IPAddress{Parent: ipaddress.ParentRef{Group: "example.com", Resource: "widgets", Name: "w/1%"}}))
	f.Add([]byte(`{"v":1,"resource":"\xff"}`))
	f.Add([]byte(`{"v":0}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	const key = "/p/v1/ips/4/0a000001"
	a := netip.MustParseAddr("10.0.0.1")
	f.Add([]byte(`{"v":2,"resource":"services","name":"a","created":-0}`))
	f.Add(encodeRecordVersion(ipaddress.IPAddress{Parent: ipaddress.ParentRef{Resource: "services", Name: "replaced"}, Created: time.Unix(0, 7)}, replacedRecordVersion))
	f.Add([]byte(`{"v":4,"resource":"services","name":"a","created":1}`))
	f.Add([]byte(`{"v":2,"resource":"services","name":"a<b>","created":012}`))
	f.Add([]byte(`{"v":1,"group":"g","resource":"r","namespace":"n","name":"x","created":9223372036854775808}`))
	f.Add([]byte(`{"v":3,"group":"","resource":"a&b","namespace":"","name":"\u0061\/","created":-0}`))
	f.Add([]byte("{\"v\":2,\"resource\":\"\xff\",\"name\":\"\u2028\",\"created\":1,\"Name\":null} "))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The fast path decodes what json.Unmarshal decodes, the same way.
		if v, ok := decodePlainRecord(b); ok {
			var w recordValue
			if err := json.Unmarshal(b, &w); err != nil || w != v {
				t.Fatalf("%q: fast path %+v, json %+v (%v)", b, v, w, err)
			}
		}
		r, version, err := recordVersionFromKV(key, a, b, 9)
		if err != nil {
			checkCorrupt(t, err, key)
			return
		}
		if r.Addr != a || r.Revision != 9 {
			t.Fatalf("decoded %+v", r)
		}
		// What is read is what was written, in its version.
		if enc := encodeRecordVersion(r, version); !bytes.Equal(enc, b) {
			t.Fatalf("%q read as %+v v%d, which is stored as %s", b, r, version, enc)
		}
		enc := encodeRecord(r)
		// Built directly or not, the encoding is encoding/json's.
		p := r.Parent
		if want, err := json.Marshal(recordValue{V: recordVersion, Group: p.Group, Resource: p.Resource, Namespace: p.Namespace, Name: p.Name, Created: r.Created.UnixNano()}); err != nil || !bytes.Equal(enc, want) {
			t.Fatalf("encodeRecord(%+v) = %s, json %s", r, enc, want)
		}
		again, err := recordFromKV(key, a, enc, 9)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if again.Parent != r.Parent || !again.Created.Equal(r.Created) || !bytes.Equal(encodeRecord(again), enc) {
			t.Fatalf("round trip of %q: %+v then %+v", b, r, again)
		}
	})
}

func FuzzAddrKey(f *testing.F) {
	const pfx = "/p/v1/ips/"
	for _, s := range []string{"10.0.0.1", "0.0.0.0", "255.255.255.255", "2001:db8::1", "::", "::ffff:10.0.0.1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"} {
		f.Add(pfx + addrSuffix(netip.MustParseAddr(s)))
	}
	f.Add(pfx + "4/0A000001")
	f.Add(pfx + "4/0a00000")
	f.Add(pfx + "5/0a000001")
	f.Add(pfx + "6/")
	f.Add("/elsewhere/4/0a000001")
	f.Fuzz(func(t *testing.T, key string) {
		a, err := addrFromKey(key, pfx)
		if err != nil {
			checkCorrupt(t, err, key)
			return
		}
		if got := pfx + addrSuffix(a); got != key {
			t.Fatalf("key %q decodes to %s, which encodes to %q", key, a, got)
		}
	})
}

func TestEscapeIsInjective(t *testing.T) {
	seen := map[string]string{}
	for _, s := range []string{"", "a", "a/b", "a%2Fb", "a%252Fb", "é", "%", "/", "%25", "A", "a-b.c_d~e"} {
		e := escape(s)
		if strings.Contains(e, "/") {
			t.Fatalf("escape(%q) = %q holds a slash", s, e)
		}
		if prev, ok := seen[e]; ok {
			t.Fatalf("escape(%q) = escape(%q) = %q", s, prev, e)
		}
		seen[e] = s
	}
}
