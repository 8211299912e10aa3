package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// shortWriter takes room bytes, then fails every write as a full disk does.
type shortWriter struct {
	buf  bytes.Buffer
	room int
}

var errNoRoom = errors.New("no space left on device")

func (w *shortWriter) Write(p []byte) (int, error) {
	n := min(len(p), w.room-w.buf.Len())
	w.buf.Write(p[:n])
	if n < len(p) {
		return n, errNoRoom
	}
	return n, nil
}

// TestAChangeWhoseOutputCannotBeWrittenIsToldOnStderr: stdout fails
// part-way through (a full disk): the change stands, what was not written
// goes to stderr after what was, so that the two read as the whole, and
// the command exits 1, or with its own code if it failed anyway.
func TestAChangeWhoseOutputCannotBeWrittenIsToldOnStderr(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ipamctl := func(stdout *shortWriter, args ...string) (int, string) {
		var errb bytes.Buffer
		code := run(t.Context(), append([]string{"--db", db}, args...), strings.NewReader(""), stdout, &errb)
		return code, errb.String()
	}
	const lost = "ipamctl: writing the output: no space left on device; what was not written follows:\n"

	if code, stderr := ipamctl(&shortWriter{room: 0}, "cidr", "create", "k", "10.96.0.0/28"); code != exitError || stderr != lost+"cidr/k created\n"+
		"ipamctl: the command was carried out, but its output could not be written: no space left on device\n" {
		t.Fatalf("cidr create with stdout full: exit %d, stderr %q", code, stderr)
	}

	// JSON cut after 20 bytes: the rest, on stderr, completes it.
	out := &shortWriter{room: 20}
	code, stderr := ipamctl(out, "ip", "allocate", "--family", "4", "--parent", "services/default/a", "-o", "json")
	if code != exitError || !strings.HasPrefix(stderr, lost) {
		t.Fatalf("ip allocate with stdout full after 20 bytes: exit %d, stderr %q", code, stderr)
	}
	rest, _, _ := strings.Cut(strings.TrimPrefix(stderr, lost), "ipamctl: the command was carried out")
	var printed ipObject
	if err := json.Unmarshal([]byte(out.buf.String()+rest), &printed); err != nil || out.buf.Len() != 20 {
		t.Fatalf("stdout %q and stderr's rest %q do not make the record: %v", out.buf.String(), rest, err)
	}
	// The allocation was made, and is the one told.
	held := &shortWriter{room: 1 << 20}
	if code, stderr := ipamctl(held, "ip", "get", "--parent", "services/default/a", "-o", "json"); code != 0 {
		t.Fatalf("ip get: exit %d: %s", code, stderr)
	}
	var list struct{ Items []ipObject }
	if err := json.Unmarshal(held.buf.Bytes(), &list); err != nil || len(list.Items) != 1 || list.Items[0].Name != printed.Name {
		t.Fatalf("services/default/a holds %s (%v), told %s", held.buf.String(), err, printed.Name)
	}

	// A command that fails keeps its code: the deletion is pending (6).
	code, stderr = ipamctl(&shortWriter{room: 0}, "cidr", "delete", "k")
	if code != exitPending || !strings.HasPrefix(stderr, lost+"cidr/k terminating") || !strings.Contains(stderr, "blocking addresses: "+printed.Name) {
		t.Fatalf("cidr delete with stdout full: exit %d, stderr %q", code, stderr)
	}
}

// TestLostOutputIsBounded: past maxLostOutput bytes, only a count is kept.
func TestLostOutputIsBounded(t *testing.T) {
	o := &outputWriter{w: &shortWriter{room: 3}}
	chunk := bytes.Repeat([]byte("x"), 1000)
	total := 0
	for total < 2*maxLostOutput {
		if n, err := o.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write: %d, %v; want every byte taken", n, err)
		}
		total += len(chunk)
	}
	if !errors.Is(o.err, errNoRoom) || len(o.lost) != maxLostOutput || o.dropped != total-3-maxLostOutput {
		t.Fatalf("err %v, kept %d, dropped %d; want %v, %d, %d", o.err, len(o.lost), o.dropped, errNoRoom, maxLostOutput, total-3-maxLostOutput)
	}
}
