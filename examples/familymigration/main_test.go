package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestFamilyMigrationMovesEveryServiceToIPv6(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	moves := regexp.MustCompile(`service default/(\w+): (\S+) -> (\S+)`).FindAllStringSubmatch(got, -1)
	if len(moves) != 4 {
		t.Fatalf("want 4 services moved, got %d\n%s", len(moves), got)
	}
	for _, m := range moves {
		if !strings.HasPrefix(m[2], "10.96.0.") || !strings.HasPrefix(m[3], "fd00:10:96::") {
			t.Errorf("%s moved %s -> %s", m[1], m[2], m[3])
		}
	}
	if !strings.Contains(got, "service default/kubernetes: 10.96.0.1 -> fd00:10:96::1\n") {
		t.Error("kubernetes.default did not take the first address of the IPv6 prefix")
	}
	if !regexp.MustCompile(`(?m)^kubernetes\s+fd00:10:96::/112\s`).MatchString(got[strings.LastIndex(got, "renumbered"):]) {
		t.Errorf("the default CIDR was not replaced by the IPv6 one:\n%s", got)
	}
}
