package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestResizeDeletesTheCoveredCIDRAtOnce(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"10.0.0.0/24 is full after 254 services: range is full\n",
		"small deleted at once: big covers every address it held\n",
		"big 10.0.0.0/23: 255 used, 255 free of 510\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q\n%s", want, got)
		}
	}
	if !strings.Contains(got, "after-resize: clusterIP 10.0.") {
		t.Error("no allocation after the resize")
	}
}
