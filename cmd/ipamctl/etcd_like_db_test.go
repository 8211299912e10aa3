package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// normalizeRun removes from an output what differs from run to run
// whatever the store: ages, creation times, how long ago something was
// created, and the store's own name (the --db path, the etcd endpoint).
func normalizeRun(s string, names ...string) string {
	for _, n := range names {
		s = strings.ReplaceAll(s, n, "STORE")
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`"created": "[^"]*"`),
		regexp.MustCompile(`created: "[^"]*"`),
		regexp.MustCompile(`Created:\s+\S+ \([^)]*\)`),
		regexp.MustCompile(`created [0-9.]+[a-zµ]+ ago`),
		regexp.MustCompile(`\b[0-9]+(\.[0-9]+)?(ns|µs|ms|s|m|h)\b`),
	} {
		s = re.ReplaceAllString(s, "T")
	}
	// Tables are padded to their widest cell, which T may have shortened.
	s = regexp.MustCompile(` {2,}`).ReplaceAllString(s, "  ")
	return s
}

// Every ipamctl command gives, over --etcd, the outputs and the exit code
// it gives over --db for the same sequence of commands. The sequence goes
// through every command and most of the exit codes; each of its dynamic
// allocations has one free address to take, so that neither the random
// start nor the choice among CIDRs makes the stores differ.
func TestEveryCommandOverEtcdAnswersAsOverDB(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	dir := t.TempDir()
	consumers := filepath.Join(dir, "consumers.json")
	if err := os.WriteFile(consumers, []byte(`[
  {"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"]},
  {"parentRef": "services/default/web", "addresses": ["10.96.0.2", "10.96.0.9"]},
  {"parentRef": "services/default/legacy", "addresses": ["172.20.0.5"]},
  {"parentRef": "services/default/bad", "addresses": ["10.96.0.300"]}
]`), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "ipam.db")
	ep := startEtcd(t)
	stores := []*cli{
		{t: t, store: []string{"--db", db}},
		{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/like-db"}},
	}
	steps := [][]string{
		{"cidr", "create", "tiny", "10.1.0.0/30"},
		{"cidr", "create", "dual", "10.2.0.0/30", "fd00:2::/127"},
		{"ip", "get"},
		{"ip", "get", "-o", "json"},
		{"cidr", "update", "tiny", "10.1.0.0/30", "fd00:1::/127"},
		{"cidr", "update", "tiny", "10.1.0.0/30", "fd00:9::/127"},
		{"cidr", "update", "nosuch", "10.1.0.0/30", "fd00:1::/127"},
		{"cidr", "get"},
		{"cidr", "get", "-o", "json"},
		{"cidr", "get", "tiny"},
		{"cidr", "get", "tiny", "-o", "yaml"},
		{"cidr", "get", "nosuch"},
		{"ip", "allocate", "10.1.0.1", "--parent", "services/default/a"},
		{"ip", "allocate", "10.2.0.1", "--parent", "services/default/c"},
		{"ip", "allocate", "fd00:1::1", "--parent", "services/default/c6"},
		{"ip", "allocate", "10.2.0.2", "--parent", "services/default/c2"},
		{"ip", "allocate", "--family", "4", "--parent", "services/default/b", "--dry-run"},
		{"ip", "allocate", "--family", "4", "--parent", "services/default/b"},
		{"ip", "allocate", "--family", "4", "--parent", "services/default/b", "--ensure", "--dry-run", "-o", "json"},
		{"ip", "release", "10.2.0.2"},
		{"ip", "allocate", "--family", "dual", "--parent", "services/default/d", "--dry-run", "-o", "yaml"},
		{"ip", "allocate", "--family", "dual", "--parent", "services/default/d"},
		{"ip", "allocate", "--family", "6", "--parent", "services/default/e", "--dry-run"},
		{"ip", "allocate", "--family", "6", "--parent", "services/default/e"},
		{"ip", "allocate", "--family", "4", "--parent", "services/default/full"},
		{"ip", "allocate", "--family", "dual", "--parent", "services/default/full"},
		{"cidr", "create", "kubernetes", "10.96.0.0/28"},
		{"cidr", "create", "kubernetes", "10.96.0.0/28"},
		{"cidr", "create", "Bad_Name", "10.96.0.0/28"},
		{"cidr", "create", "bits", "10.96.0.1/28"},
		{"ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes"},
		{"ip", "allocate", "10.96.0.1", "--parent", "services/default/other", "--dry-run"},
		{"ip", "allocate", "10.96.0.1", "--parent", "services/default/other"},
		{"ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes", "--ensure", "--dry-run"},
		{"ip", "allocate", "10.96.0.0", "--parent", "services/default/other"},
		{"ip", "allocate", "172.16.0.1", "--parent", "services/default/other"},
		{"ip", "allocate", "10.96.0.2", "--parent", "not-a-ref"},
		{"ip", "allocate", "10.96.0.2", "--parent", "services/default/web"},
		{"ip", "allocate", "10.96.0.3", "--parent", "services/default/web"},
		{"ip", "allocate", "10.96.0.4", "--parent", "services/default/gone"},
		{"ip", "get"},
		{"ip", "get", "-o", "json"},
		{"ip", "get", "10.96.0.1"},
		{"ip", "get", "10.96.0.1", "-o", "yaml"},
		{"ip", "get", "10.96.0.99"},
		{"ip", "get", "--parent", "services/default/web"},
		{"ip", "get", "--cidr", "tiny"},
		{"ip", "get", "--cidr", "nosuch"},
		{"usage"},
		{"usage", "-o", "json"},
		{"cidr", "delete", "tiny", "--dry-run"},
		{"cidr", "delete", "tiny", "--dry-run", "-o", "json"},
		{"cidr", "delete", "tiny"},
		{"cidr", "get", "tiny"},
		{"cidr", "get", "tiny", "-o", "json"},
		{"ip", "allocate", "10.1.0.2", "--parent", "services/default/f"},
		{"usage"},
		{"repair", "--consumers", consumers, "--dry-run"},
		{"repair", "--consumers", consumers, "--leak-grace", "0s", "-o", "json"},
		{"repair", "--consumers", consumers, "--leak-grace", "0s"},
		{"ip", "get"},
		{"ip", "release", "10.1.0.1", "10.96.0.77", "10.1.0.1"},
		{"ip", "release", "--parent", "services/default/b"},
		{"cidr", "get", "tiny"},
		{"ip", "release", "--parent", "services/default/nobody"},
		{"ip", "release", "fd00:1::1"},
		{"cidr", "get"},
		{"cidr", "delete", "tiny"},
		{"cidr", "delete", "dual", "--dry-run"},
		{"cidr", "delete", "dual"},
		{"cidr", "delete", "nosuch", "--dry-run"},
		{"cidr", "delete", "nosuch"},
		{"ip", "release", "10.2.0.1", "10.2.0.2", "fd00:2::1"},
		{"cidr", "get"},
		{"usage"},
	}
	for _, step := range steps {
		var outs []result
		for _, c := range stores {
			r := c.run(step...)
			r.stdout = normalizeRun(r.stdout, db, ep)
			r.stderr = normalizeRun(r.stderr, db, ep)
			outs = append(outs, r)
		}
		if outs[0] != outs[1] {
			t.Errorf("ipamctl %s:\n--db:   exit %d\n%s%s\n--etcd: exit %d\n%s%s", strings.Join(step, " "),
				outs[0].code, outs[0].stdout, outs[0].stderr, outs[1].code, outs[1].stdout, outs[1].stderr)
		} else if testing.Verbose() {
			fmt.Printf("ipamctl %s: exit %d\n%s%s", strings.Join(step, " "), outs[0].code, outs[0].stdout, outs[0].stderr)
		}
	}
}
