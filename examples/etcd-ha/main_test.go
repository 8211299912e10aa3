package main

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	prefix := netip.MustParsePrefix("10.96.0.0/28")
	seen := map[netip.Addr]string{}
	instances := map[string]bool{}
	lastGrant, firstFull := -1, -1
	for i, line := range lines {
		if inst, rest, ok := strings.Cut(line, " got "); ok {
			addr := netip.MustParseAddr(strings.Fields(rest)[0])
			if prev, dup := seen[addr]; dup {
				t.Fatalf("%s given to %s and %s", addr, prev, inst)
			}
			if !prefix.Contains(addr) || addr == prefix.Addr() || addr == netip.MustParseAddr("10.96.0.15") {
				t.Fatalf("%s is not a usable address of %s", addr, prefix)
			}
			seen[addr] = inst
			instances[inst] = true
			lastGrant = i
		}
		if strings.HasSuffix(line, ": range is full") && firstFull < 0 {
			firstFull = i
		}
	}
	if len(seen) != 14 {
		t.Fatalf("%d distinct addresses, want 14", len(seen))
	}
	// run fails by itself if "range is full" came while an address was
	// free; here, that it came at all.
	if firstFull < 0 || firstFull < lastGrant {
		t.Fatalf("no \"range is full\" after the last grant (line %d, last grant line %d)", firstFull, lastGrant)
	}
	if want := "total: 14 addresses granted, 14 distinct, 14 records in etcd, 0 collisions"; lines[len(lines)-1] != want {
		t.Fatalf("last line %q, want %q", lines[len(lines)-1], want)
	}
}
