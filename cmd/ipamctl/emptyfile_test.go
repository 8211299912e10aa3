package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A 0-byte --db file (made by touch, or left by a crash before bbolt's
// first write) holds no store, as a missing file does: the commands that
// act on what a store holds refuse it, exit 1, naming the file and leaving
// it as it was, rather than make an empty store of it and answer "not
// found" (exit 3), which a script takes for done. The commands that create
// a missing store make one of it, as bbolt does of a file it created.
func TestAnEmptyDBFileIsNoStoreYet(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cli{t: t, store: []string{"--db", empty}}
	for _, cmd := range [][]string{
		{"ip", "release", "10.96.0.2"},
		{"ip", "release", "--parent", "services/default/a"},
		{"cidr", "delete", "kubernetes"},
		{"cidr", "update", "kubernetes", "10.96.0.0/24", "fd00::/120"},
		{"cidr", "get"},
		{"usage"},
	} {
		c.fail(exitError, "no store at "+empty+": the file is empty, not a netipam store (this command does not create one; check --db)", cmd...)
		if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
			t.Fatalf("%v changed the empty file: size %d, %v", cmd, fi.Size(), err)
		}
	}

	for _, create := range [][]string{
		{"cidr", "create", "kubernetes", "10.96.0.0/24"},
		{"ip", "allocate", "10.96.0.2", "--parent", "services/default/a"},
	} {
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if create[0] == "ip" {
			// A store now, empty: no CIDR serves the address.
			c.fail(exitUsage, "does not match the current range", create...)
		} else {
			c.ok(create...)
			c.ok("ip", "allocate", "10.96.0.2", "--parent", "services/default/a")
			if got := c.ok("ip", "get", "10.96.0.2"); !strings.Contains(got, "services/default/a") {
				t.Errorf("ip get on the store made of the empty file: %q", got)
			}
		}
		if fi, err := os.Stat(empty); err != nil || fi.Size() == 0 {
			t.Fatalf("%v left no store in the empty file: %v", create, err)
		}
	}
}
