package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestRenumberingMovesEveryServiceAndReplacesTheDefaultLast(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"a new service asking for an address of 10.96.0.0/28: the provided IP (10.96.0.6) is not in the valid range. The range of valid IPs is 192.168.7.0/24 (CIDR kubernetes is terminating)",
		"service default/kubernetes: 10.96.0.1 -> 192.168.7.1\n",
		"the old default CIDR (10.96.0.0/28) is gone\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q\n%s", want, got)
		}
	}
	for _, m := range regexp.MustCompile(`service default/(\w+): \S+ -> (\S+)`).FindAllStringSubmatch(got, -1) {
		if !strings.HasPrefix(m[2], "192.168.7.") {
			t.Errorf("%s moved to %s", m[1], m[2])
		}
	}
	final := got[strings.LastIndex(got, "goes at once"):]
	if !regexp.MustCompile(`(?m)^kubernetes\s+192\.168\.7\.0/24\s`).MatchString(final) || strings.Contains(final, "10.96.") || strings.Contains(final, "renumbered") {
		t.Errorf("final state is not the new default alone:\n%s", final)
	}
}
