package main

import (
	"errors"
	"io"
	"strings"
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

// Every command line is checked before anything is opened: whatever the
// words, parseLine answers with a usage error (exit 2) or a line ready to
// run, never a panic, and never touches a store.
func FuzzCommandLine(f *testing.F) {
	for _, line := range []string{
		"cidr\x00create\x00kubernetes\x0010.96.0.0/24",
		"cidr\x00update\x00x\x0010.0.0.0/24\x0010.1.0.0/24",
		"ip\x00allocate\x00--family\x00dual\x00--parent\x00services/default/web",
		"ip\x00get\x0010.0.0.1\x00--parent\x00services/default/web",
		"ip\x00release\x00--parent\x00Services/web",
		"--etcd\x00,,\x00usage",
		"--etcd\x00127.0.0.1:1\x00--etcd-user\x00root\x00usage",
		"repair\x00--consumers\x00-\x00--leak-grace\x00-1s",
		"--timeout\x000s\x00usage",
		"-o\x00xml\x00cidr\x00get",
		"--db\x00\x00usage",
	} {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.Contains(line, "etcd-ca") || strings.Contains(line, "etcd-cert") || strings.Contains(line, "etcd-key") {
			return // those name files to read (/dev/zero would never end): not the parser's part
		}
		inv, err := parseLine(strings.Split(line, "\x00"), nil, io.Discard, io.Discard)
		if err != nil {
			if code := exitCode(err); code != exitUsage {
				t.Fatalf("%q: %v: exit %d, want %d (usage)", line, err, code, exitUsage)
			}
			return
		}
		if inv != nil && (inv.e == nil || inv.timeout <= 0) {
			t.Fatalf("%q: an invocation without env or timeout: %+v", line, inv)
		}
	})
}
