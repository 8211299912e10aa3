package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestWalkthroughsExhaustionAndDeletion(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"service default/kubernetes: clusterIP 10.96.0.1\n",
		"service kube-system/kube-dns: clusterIP 10.96.0.10\n",
		"service default/test-13: error: failed to allocate a serviceIP: range is full\n",
		"kubernetes: 14 of 14 addresses used\n",
		`newcidr1: Ready=False reason=Terminating message="There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"`,
		"service default/late: error: failed to allocate a serviceIP: range is full\n",
		"newcidr1 is gone: its finalizer was released with its last address\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// 13 more addresses from the /28 (kube-dns and 12 dynamic), all distinct.
	first := regexp.MustCompile(`clusterIP (10\.96\.0\.\d+)`).FindAllStringSubmatch(got, -1)
	seen := map[string]bool{}
	for _, m := range first {
		if seen[m[1]] {
			t.Errorf("%s handed out twice", m[1])
		}
		seen[m[1]] = true
	}
	if len(seen) != 14 {
		t.Errorf("%d addresses from 10.96.0.0/28, want 14", len(seen))
	}
	after := regexp.MustCompile(`after-\d: clusterIP (\S+)`).FindAllStringSubmatch(got, -1)
	if len(after) != 3 {
		t.Fatalf("want 3 allocations after newcidr1, got %d", len(after))
	}
	for _, m := range after {
		if !strings.HasPrefix(m[1], "192.96.0.") {
			t.Errorf("allocation after adding newcidr1 gave %s", m[1])
		}
	}
	if !regexp.MustCompile(`(?m)^newcidr1 \(Terminating\)\s+192\.96\.0\.0/24\s+\d+s$`).MatchString(got) {
		t.Error("the table does not show newcidr1 Terminating")
	}
	tail := got[strings.LastIndex(got, "$ kubectl get servicecidrs"):]
	if strings.Contains(tail, "newcidr1   ") {
		t.Errorf("newcidr1 still listed at the end:\n%s", tail)
	}
}
