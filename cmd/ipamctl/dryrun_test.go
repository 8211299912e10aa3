package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
	"github.com/netipam/netipam/store/etcd"
)

// readFile returns the bytes of the file at path.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// copyOf copies the bbolt file at base to a new file of the test, and
// returns its path.
func copyOf(t *testing.T, base []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ipam.db")
	if err := os.WriteFile(path, base, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dryRunOn runs a dry run on the bbolt file at path while this process
// holds a reader's shared lock on it, with --lock-timeout 0: a command
// that opened the file to write would need the lock to itself, and fail at
// once (exit 1, the lock is held). The tests run as root, who may write a
// file of mode 0444: the lock, not the mode, shows the file opened
// read-only. It fails the test if the file's bytes changed.
func dryRunOn(t *testing.T, path string, args ...string) result {
	t.Helper()
	before := readFile(t, path)
	reader, err := bolt.Open(path, bolt.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	r := (&cli{t: t, store: []string{"--db", path, "--lock-timeout", "0"}}).run(append(args, "--dry-run")...)
	reader.Close()
	if !bytes.Equal(readFile(t, path), before) {
		t.Errorf("ipamctl %s --dry-run changed the file", strings.Join(args, " "))
	}
	return r
}

// marked is what a dry run of ip allocate prints in a table, given what
// the command prints: each line marked a dry run.
func marked(out string) string {
	if out == "" {
		return ""
	}
	return strings.ReplaceAll(out, "\n", dryRunMark+"\n")
}

// dryRunFixture is a bbolt file with one free address of each family:
// 10.0.0.4 and fd00::5, so that a dynamic allocation has one answer, its
// dry run's and its own. services/default/held holds 10.0.0.1 and fd00::1,
// services/default/half 10.0.0.2; services/default/new holds none.
func dryRunFixture(t *testing.T) []byte {
	t.Helper()
	c := newBoltCLI(t)
	c.ok("cidr", "create", "v4", "10.0.0.0/29")
	c.ok("cidr", "create", "v6", "fd00::/125")
	for addr, owner := range map[string]string{
		"10.0.0.1": "held", "fd00::1": "held", "10.0.0.2": "half",
		"10.0.0.3": "filler", "10.0.0.5": "filler", "10.0.0.6": "filler",
		"fd00::2": "filler", "fd00::3": "filler", "fd00::4": "filler", "fd00::6": "filler", "fd00::7": "filler",
	} {
		c.ok("ip", "allocate", addr, "--parent", "services/default/"+owner)
	}
	return readFile(t, c.store[1])
}

// Every form of ip allocate --dry-run prints what the command, run next,
// prints, marked a dry run: in a table each line ends "(dry run: nothing
// changed)"; in JSON the object (and a list, beside its items) has
// "dryRun": true, and a record the command makes has no "created" in the
// dry run, while one REF holds already (--ensure) is printed whole. The
// dry run exits 0 as the command does, changes nothing in the file, and
// opens it read-only.
func TestADryRunOfIPAllocatePrintsWhatTheCommandThenPrints(t *testing.T) {
	base := dryRunFixture(t)
	for _, form := range []struct {
		args []string
		held int // records REF holds already among those printed
	}{
		{[]string{"--family", "4", "--parent", "services/default/new"}, 0},
		{[]string{"--family", "6", "--parent", "services/default/new"}, 0},
		{[]string{"--family", "dual", "--parent", "services/default/new"}, 0},
		{[]string{"--family", "4", "--ensure", "--parent", "services/default/new"}, 0},
		{[]string{"--family", "4", "--ensure", "--parent", "services/default/held"}, 1},
		{[]string{"--family", "6", "--ensure", "--parent", "services/default/held"}, 1},
		{[]string{"--family", "dual", "--ensure", "--parent", "services/default/new"}, 0},
		{[]string{"--family", "dual", "--ensure", "--parent", "services/default/half"}, 1},
		{[]string{"--family", "dual", "--ensure", "--parent", "services/default/held"}, 2},
		{[]string{"10.0.0.4", "--parent", "services/default/new"}, 0},
		{[]string{"fd00::5", "--ensure", "--parent", "services/default/new"}, 0},
		{[]string{"10.0.0.1", "--ensure", "--parent", "services/default/held"}, 1},
	} {
		args := append([]string{"ip", "allocate"}, form.args...)
		line := strings.Join(args, " ")
		// In a table.
		path := copyOf(t, base)
		dry := dryRunOn(t, path, args...)
		real := (&cli{t: t, store: []string{"--db", path}}).run(args...)
		if dry.code != 0 || real.code != 0 || dry.stderr != "" {
			t.Fatalf("ipamctl %s: dry run exit %d %q, then exit %d %q", line, dry.code, dry.stderr, real.code, real.stderr)
		}
		if dry.stdout != marked(real.stdout) {
			t.Errorf("ipamctl %s --dry-run printed\n%s\nthe command then\n%s", line, dry.stdout, real.stdout)
		}
		// In JSON.
		path = copyOf(t, base)
		dry = dryRunOn(t, path, append(args, "-o", "json")...)
		real = (&cli{t: t, store: []string{"--db", path}}).run(append(args, "-o", "json")...)
		if dry.code != 0 || real.code != 0 {
			t.Fatalf("ipamctl %s -o json: dry run exit %d %q, then exit %d %q", line, dry.code, dry.stderr, real.code, real.stderr)
		}
		if err := sameButMarked(dry.stdout, real.stdout, form.held); err != nil {
			t.Errorf("ipamctl %s -o json: %v\ndry run:\n%s\nthe command then:\n%s", line, err, dry.stdout, real.stdout)
		}
	}
}

// sameButMarked tells how dry, what a --dry-run -o json printed (ip
// allocate's, cidr create's, cidr update's, ip release's), differs from
// real, what the command then printed, beyond "dryRun": true (on the
// object, or on the list and each of its items) and the creation time of
// the objects the command made; held objects of dry (records REF holds,
// a CIDR updated) must be printed whole.
func sameButMarked(dry, real string, held int) error {
	var d, r map[string]any
	if err := json.Unmarshal([]byte(dry), &d); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(real), &r); err != nil {
		return err
	}
	items := func(top map[string]any) []map[string]any {
		list, ok := top["items"].([]any)
		if !ok {
			return []map[string]any{top}
		}
		var out []map[string]any
		for _, it := range list {
			m, _ := it.(map[string]any)
			out = append(out, m)
		}
		return out
	}
	di, ri := items(d), items(r)
	if len(di) != len(ri) {
		return fmt.Errorf("%d records, the command's %d", len(di), len(ri))
	}
	if _, isList := d["items"]; isList {
		if d["dryRun"] != true {
			return errors.New(`the list lacks "dryRun": true`)
		}
		delete(d, "dryRun")
	}
	whole := 0
	for i, o := range di {
		if o["dryRun"] != true {
			return fmt.Errorf(`record %d lacks "dryRun": true`, i)
		}
		delete(o, "dryRun")
		if _, ok := o["created"]; ok {
			whole++
		} else {
			delete(ri[i], "created")
		}
	}
	if whole != held {
		return fmt.Errorf("%d records printed with their creation time, want the %d REF holds", whole, held)
	}
	if diff := cmp.Diff(r, d); diff != "" {
		return fmt.Errorf("the records differ (-command +dry run):\n%s", diff)
	}
	return nil
}

// ip allocate --dry-run that fails, fails as the command run next does:
// the same exit code (4 for an address taken, 5 for a full range, 2 for no
// CIDR of the family or an address in none), the same message, nothing on
// stdout. One that succeeds where the command would (--ensure of an
// address REF holds in a Terminating CIDR) prints what it prints. The
// file is left as it was.
func TestADryRunOfIPAllocateExitsAsTheCommandThenExits(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "full", "10.1.0.0/30")
	c.ok("ip", "allocate", "10.1.0.1", "--parent", "services/default/a")
	c.ok("ip", "allocate", "10.1.0.2", "--parent", "services/default/b")
	c.ok("cidr", "create", "going", "10.2.0.0/29")
	c.ok("ip", "allocate", "10.2.0.1", "--parent", "services/default/keeper")
	c.fail(exitPending, "", "cidr", "delete", "going")
	base := readFile(t, c.store[1])
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--family", "4", "--parent", "services/default/c"}, exitFull},
		{[]string{"--family", "4", "--ensure", "--parent", "services/default/c"}, exitFull},
		{[]string{"--family", "dual", "--parent", "services/default/c"}, exitFull},
		{[]string{"--family", "dual", "--ensure", "--parent", "services/default/c"}, exitFull},
		{[]string{"--family", "dual", "--ensure", "--parent", "services/default/a"}, exitUsage}, // holds 10.1.0.1, gets no IPv6
		{[]string{"--family", "6", "--parent", "services/default/c"}, exitUsage},
		{[]string{"10.1.0.1", "--parent", "services/default/c"}, exitConflict},
		{[]string{"10.1.0.1", "--parent", "services/default/a"}, exitConflict}, // held by REF, but without --ensure
		{[]string{"10.1.0.1", "--ensure", "--parent", "services/default/c"}, exitConflict},
		{[]string{"10.9.0.1", "--parent", "services/default/c"}, exitUsage},
		{[]string{"10.9.0.1", "--ensure", "--parent", "services/default/c"}, exitUsage},
		{[]string{"10.2.0.3", "--parent", "services/default/c"}, exitUsage},               // Terminating
		{[]string{"10.2.0.1", "--ensure", "--parent", "services/default/keeper"}, exitOK}, // held, in a Terminating CIDR
	} {
		args := append([]string{"ip", "allocate"}, tc.args...)
		path := copyOf(t, base)
		dry := dryRunOn(t, path, args...)
		real := (&cli{t: t, store: []string{"--db", path}}).run(args...)
		if dry.code != tc.code || real.code != tc.code {
			t.Errorf("ipamctl %s: dry run exit %d, the command %d; want %d\n%s%s", strings.Join(args, " "), dry.code, real.code, tc.code, dry.stderr, real.stderr)
		}
		if dry.stderr != real.stderr || dry.stdout != marked(real.stdout) {
			t.Errorf("ipamctl %s: the dry run said\n%s%s\nthe command\n%s%s", strings.Join(args, " "), dry.stdout, dry.stderr, real.stdout, real.stderr)
		}
	}
}

// cidr delete --dry-run says what the deletion would do, as it says it,
// with its exit code, and does none of it: a CIDR nothing holds (or whose
// addresses another covers) would go at once, exit 0, and is still there,
// Ready; one addresses hold would be left Terminating, exit 6, held by the
// addresses it lists (those cidr get lists once it is), and stays Ready.
// In JSON, "dryRun": true.
func TestADryRunOfCIDRDeleteSaysWhetherItWouldGoAtOnce(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "empty", "10.5.0.0/24")
	c.ok("cidr", "create", "held", "10.6.0.0/24")
	c.ok("ip", "allocate", "10.6.0.20", "--parent", "services/default/x")
	c.ok("ip", "allocate", "10.6.0.7", "--parent", "services/default/y")
	c.ok("cidr", "create", "small", "10.7.0.0/24")
	c.ok("ip", "allocate", "10.7.0.5", "--parent", "services/default/z")
	c.ok("cidr", "create", "big", "10.7.0.0/23")
	path := c.store[1]

	for _, name := range []string{"empty", "small"} {
		dry := dryRunOn(t, path, "cidr", "delete", name)
		if dry.code != exitOK || dry.stdout != "cidr/"+name+" deleted"+dryRunMark+"\n" {
			t.Errorf("cidr delete %s --dry-run: exit %d\n%s%s", name, dry.code, dry.stdout, dry.stderr)
		}
		var res deleteResult
		if r := dryRunOn(t, path, "cidr", "delete", name, "-o", "json"); r.code != exitOK || json.Unmarshal([]byte(r.stdout), &res) != nil ||
			!reflect.DeepEqual(res, deleteResult{Name: name, Deleted: true, DryRun: true}) {
			t.Errorf("cidr delete %s --dry-run -o json: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
		}
		if got := fieldOf(c.ok("cidr", "get", name), "Status:"); got != "Ready" {
			t.Errorf("after cidr delete %s --dry-run, cidr get says Status %q, want Ready", name, got)
		}
		if out := c.ok("cidr", "delete", name); dry.stdout != marked(out) {
			t.Errorf("cidr delete %s --dry-run printed\n%s\nthe command then\n%s", name, dry.stdout, out)
		}
	}

	dry := dryRunOn(t, path, "cidr", "delete", "held")
	lines := strings.Split(dry.stdout, "\n")
	want := []string{
		"cidr/held terminating: Ready=False reason=Terminating: " + cidrset.MessageBlockedDelete + dryRunMark,
		"blocking addresses: 10.6.0.7, 10.6.0.20",
		"",
	}
	if dry.code != exitPending || !slices.Equal(lines, want) || dry.stderr != "" {
		t.Errorf("cidr delete held --dry-run: exit %d, want %d\n%s%s", dry.code, exitPending, dry.stdout, dry.stderr)
	}
	var res deleteResult
	if r := dryRunOn(t, path, "cidr", "delete", "held", "-o", "json"); r.code != exitPending || json.Unmarshal([]byte(r.stdout), &res) != nil ||
		!res.DryRun || !res.Terminating || res.Deleted || !slices.Equal(res.Blocking, []string{"10.6.0.7", "10.6.0.20"}) {
		t.Errorf("cidr delete held --dry-run -o json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := fieldOf(c.ok("cidr", "get", "held"), "Status:"); got != "Ready" {
		t.Errorf("after cidr delete held --dry-run, cidr get says Status %q, want Ready", got)
	}
	real := c.run("cidr", "delete", "held")
	if real.code != exitPending || dry.stdout != strings.Replace(real.stdout, "\n", dryRunMark+"\n", 1) {
		t.Errorf("cidr delete held --dry-run printed\n%s\nthe command then, exit %d\n%s", dry.stdout, real.code, real.stdout)
	}
	var o cidrObject
	c.json(&o, "cidr", "get", "held")
	if !o.Terminating || !slices.Equal(o.Blocking, res.Blocking) {
		t.Errorf("the dry run listed %v; cidr get lists %v (Terminating: %v)", res.Blocking, o.Blocking, o.Terminating)
	}

	dry = dryRunOn(t, path, "cidr", "delete", "nosuch")
	real = c.run("cidr", "delete", "nosuch")
	if dry.code != exitNotFound || dry != real {
		t.Errorf("cidr delete nosuch: the dry run %+v, the command %+v", dry, real)
	}
}

// sameAsTheCommand runs ipamctl args --dry-run (through dryRunOn: the file
// opened read-only, its bytes unchanged) on a copy of base, then args on
// the same copy, in a table and again in JSON, and fails t unless both
// exit code, and the dry run says what the command then says: the same
// stderr, the same stdout with each line marked a dry run, and in JSON
// the same objects, marked, less the creation time of those the command
// made (sameButMarked, held objects printed whole).
func sameAsTheCommand(t *testing.T, base []byte, args []string, code, held int) {
	t.Helper()
	line := strings.Join(args, " ")
	for _, out := range [][]string{nil, {"-o", "json"}} {
		args := append(slices.Clone(args), out...)
		path := copyOf(t, base)
		dry := dryRunOn(t, path, args...)
		real := (&cli{t: t, store: []string{"--db", path}}).run(args...)
		if dry.code != code || real.code != code {
			t.Errorf("ipamctl %s %s: dry run exit %d, the command %d; want %d\n%s%s", line, out, dry.code, real.code, code, dry.stderr, real.stderr)
		}
		if dry.stderr != real.stderr {
			t.Errorf("ipamctl %s %s: the dry run said\n%s\nthe command\n%s", line, out, dry.stderr, real.stderr)
		}
		switch {
		case out == nil && dry.stdout != marked(real.stdout):
			t.Errorf("ipamctl %s --dry-run printed\n%s\nthe command then\n%s", line, dry.stdout, real.stdout)
		case out != nil && real.stdout == "" && dry.stdout != "":
			t.Errorf("ipamctl %s %s --dry-run printed\n%s\nthe command nothing", line, out, dry.stdout)
		case out != nil && real.stdout != "":
			if err := sameButMarked(dry.stdout, real.stdout, held); err != nil {
				t.Errorf("ipamctl %s %s: %v\ndry run:\n%s\nthe command then:\n%s", line, out, err, dry.stdout, real.stdout)
			}
		}
	}
}

// cidr create and cidr update --dry-run say what the command run next
// says, with its exit code, and do none of it (sameAsTheCommand): a CIDR
// that would be created (exit 0, in JSON without "created"), or updated
// (exit 0, in JSON whole: a Terminating one stays so); a name taken (exit
// 4), a CIDR not there (3), a change UpdateCIDR refuses (a prefix changed,
// dual- to single-stack: 2), an invalid CIDR (2).
func TestADryRunOfCIDRCreateAndUpdateSaysWhatTheCommandThenSays(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "single", "10.0.0.0/24")
	c.ok("cidr", "create", "dual", "10.1.0.0/24", "fd00:1::/120")
	c.ok("cidr", "create", "going", "10.2.0.0/24")
	c.ok("ip", "allocate", "10.2.0.7", "--parent", "services/default/keeper")
	c.fail(exitPending, "", "cidr", "delete", "going")
	base := readFile(t, c.store[1])
	for _, tc := range []struct {
		args []string
		code int
		held int // 1: the CIDR is printed whole (it exists)
	}{
		{[]string{"cidr", "create", "new", "10.3.0.0/24"}, exitOK, 0},
		{[]string{"cidr", "create", "new", "10.3.0.0/24", "fd00:3::/120"}, exitOK, 0},
		{[]string{"cidr", "create", "over", "10.0.0.0/24"}, exitOK, 0}, // overlapping is allowed
		{[]string{"cidr", "create", "single", "10.3.0.0/24"}, exitConflict, 0},
		{[]string{"cidr", "create", "going", "10.3.0.0/24"}, exitConflict, 0},
		{[]string{"cidr", "create", "Bad_Name", "10.3.0.0/24"}, exitUsage, 0},
		{[]string{"cidr", "create", "two", "10.3.0.0/24", "10.4.0.0/24"}, exitUsage, 0},
		{[]string{"cidr", "update", "single", "10.0.0.0/24", "fd00::/120"}, exitOK, 1},
		{[]string{"cidr", "update", "dual", "10.1.0.0/24", "fd00:1::/120"}, exitOK, 1}, // unchanged
		{[]string{"cidr", "update", "going", "10.2.0.0/24", "fd00:2::/120"}, exitOK, 1},
		{[]string{"cidr", "update", "nosuch", "10.0.0.0/24", "fd00::/120"}, exitNotFound, 0},
		{[]string{"cidr", "update", "single", "10.9.0.0/24", "fd00::/120"}, exitUsage, 0},
		{[]string{"cidr", "update", "dual", "10.1.0.0/24", "fd00:9::/120"}, exitUsage, 0},
		{[]string{"cidr", "update", "dual", "10.1.0.0/24"}, exitUsage, 0},
		{[]string{"cidr", "update", "single", "10.0.0.0/24", "10.9.0.0/24"}, exitUsage, 0},
	} {
		sameAsTheCommand(t, base, tc.args, tc.code, tc.held)
	}
}

// ip release --dry-run says what the command run next says, with its exit
// code, and releases nothing (sameAsTheCommand): the addresses it would
// release (an address named twice, once), those without a record named
// as the command names them (exit 3, the others listed); by owner, each
// address it holds, and of one that holds none, the same note on stderr
// (exit 0).
func TestADryRunOfIPReleaseSaysWhatTheCommandThenSays(t *testing.T) {
	base := dryRunFixture(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"ip", "release", "10.0.0.1"}, exitOK},
		{[]string{"ip", "release", "fd00::1", "10.0.0.2", "fd00::1"}, exitOK},
		{[]string{"ip", "release", "10.0.0.1", "10.0.0.4", "fd00::5"}, exitNotFound},
		{[]string{"ip", "release", "10.0.0.4"}, exitNotFound},
		{[]string{"ip", "release", "10.0.0.256"}, exitUsage},
		{[]string{"ip", "release", "--parent", "services/default/held"}, exitOK},
		{[]string{"ip", "release", "--parent", "services/default/half"}, exitOK},
		{[]string{"ip", "release", "--parent", "services/default/new"}, exitOK},
	} {
		sameAsTheCommand(t, base, tc.args, tc.code, 0)
	}
}

// A dry run reads, as cidr get does: it refuses a missing --db file, or
// an empty one, exit 1, creating or changing nothing, where the command
// itself (ip allocate, cidr create) would make a store of it.
func TestADryRunRefusesAMissingDBFile(t *testing.T) {
	dir := t.TempDir()
	missing, empty := filepath.Join(dir, "typo.db"), filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ip", "allocate", "--family", "4", "--parent", "services/default/a", "--dry-run"},
		{"ip", "allocate", "--family", "dual", "--ensure", "--parent", "services/default/a", "--dry-run"},
		{"ip", "allocate", "10.0.0.1", "--parent", "services/default/a", "--dry-run"},
		{"ip", "allocate", "10.0.0.1", "--parent", "services/default/a", "--ensure", "--dry-run"},
		{"cidr", "delete", "kubernetes", "--dry-run"},
		{"cidr", "create", "kubernetes", "10.96.0.0/24", "--dry-run"},
		{"cidr", "update", "kubernetes", "10.96.0.0/24", "fd00::/120", "--dry-run"},
		{"ip", "release", "10.0.0.1", "--dry-run"},
		{"ip", "release", "--parent", "services/default/a", "--dry-run"},
	} {
		(&cli{t: t, store: []string{"--db", missing}}).fail(exitError, "no store at "+missing+" (this command does not create one; check --db)", args...)
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%v created %s: %v", args, missing, err)
		}
		(&cli{t: t, store: []string{"--db", empty}}).fail(exitError, "no store at "+empty+": the file is empty, not a netipam store", args...)
		if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
			t.Fatalf("%v wrote to an empty file (%v)", args, err)
		}
	}
}

// strand writes to st a CIDR named name of prefix, Terminating with
// nothing in it (a cidr delete killed between its mark and its removal),
// which the next command that opens the store to write removes.
func strand(t *testing.T, st store.Store, name, prefix string) {
	t.Helper()
	ctx := context.Background()
	c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{netip.MustParsePrefix(prefix)}})
	if err != nil {
		t.Fatal(err)
	}
	c.Terminating = true
	if _, err := st.UpdateCIDR(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// A dry run does not even do what opening the store for writing does of
// itself: the removal of a CIDR left Terminating with nothing in it. Of
// that CIDR, cidr delete --dry-run says it goes at once, exit 0 (the next
// command that writes removes it, and cidr delete then finds none, exit 3).
func TestADryRunLeavesAStrandedTerminatingCIDRAsItIs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.db")
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	strand(t, st, "stranded", "10.9.0.0/24")
	if _, err := st.CreateCIDR(context.Background(), cidrset.CIDR{Name: "kept", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.8.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	c := &cli{t: t, store: []string{"--db", path}}
	for _, args := range [][]string{
		{"ip", "allocate", "--family", "4", "--parent", "services/default/a"},
		{"ip", "allocate", "10.8.0.1", "--parent", "services/default/a"},
		{"cidr", "delete", "kept"},
	} {
		if r := dryRunOn(t, path, args...); r.code != exitOK {
			t.Errorf("ipamctl %s --dry-run: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if r := dryRunOn(t, path, "cidr", "delete", "stranded"); r.code != exitOK || r.stdout != "cidr/stranded deleted"+dryRunMark+"\n" {
		t.Errorf("cidr delete stranded --dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantCIDRList(t, c.ok("cidr", "get"), map[string][2]string{"kept": {"10.8.0.0/24", "Ready"}, "stranded": {"10.9.0.0/24", "Terminating"}})
	c.fail(exitNotFound, `cidr "stranded" not found`, "cidr", "delete", "stranded")
}

// Over etcd a dry run writes nothing either, nor does a command that only
// reads, though etcd has no read-only connection: every form of ip
// allocate --dry-run, cidr delete --dry-run (held, at once, stranded),
// repair --dry-run, cidr create and update --dry-run, ip release --dry-run
// (by address and by owner), cidr get, ip get and usage leave etcd at its
// revision,
// the CIDR left Terminating with nothing in it included, which the next
// command that writes removes.
func TestDryRunsAndReadsOverEtcdWriteNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	const prefix = "/dry-run"
	c := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", prefix}}
	c.ok("cidr", "create", "v4", "10.0.0.0/29")
	c.ok("cidr", "create", "v6", "fd00::/125")
	c.ok("cidr", "create", "empty", "10.5.0.0/24")
	c.ok("ip", "allocate", "10.0.0.1", "--parent", "services/default/held")
	etc, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer etc.Close()
	st, err := etcd.New(etc, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	strand(t, st, "stranded", "10.9.0.0/24")
	revision := func() int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := etc.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	consumers := filepath.Join(t.TempDir(), "consumers.json")
	if err := os.WriteFile(consumers, []byte(`[]`), 0o600); err != nil {
		t.Fatal(err)
	}
	before := revision()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"ip", "allocate", "--family", "4", "--parent", "services/default/new"}, exitOK},
		{[]string{"ip", "allocate", "--family", "dual", "--parent", "services/default/new"}, exitOK},
		{[]string{"ip", "allocate", "--family", "dual", "--ensure", "--parent", "services/default/held"}, exitOK},
		{[]string{"ip", "allocate", "10.0.0.2", "--parent", "services/default/new"}, exitOK},
		{[]string{"ip", "allocate", "10.0.0.1", "--ensure", "--parent", "services/default/held"}, exitOK},
		{[]string{"ip", "allocate", "10.0.0.1", "--parent", "services/default/new"}, exitConflict},
		{[]string{"cidr", "delete", "v4"}, exitPending},
		{[]string{"cidr", "delete", "empty"}, exitOK},
		{[]string{"cidr", "delete", "stranded"}, exitOK},
		{[]string{"repair", "--consumers", consumers, "--leak-grace", "0s"}, exitOK},
		{[]string{"cidr", "create", "new", "10.6.0.0/24", "fd00:6::/120"}, exitOK},
		{[]string{"cidr", "create", "v4", "10.6.0.0/24"}, exitConflict},
		{[]string{"cidr", "update", "v4", "10.0.0.0/29", "fd00:9::/125"}, exitOK},
		{[]string{"cidr", "update", "stranded", "10.9.0.0/24", "fd00:9::/120"}, exitOK},
		{[]string{"cidr", "update", "v4", "10.7.0.0/29", "fd00:9::/125"}, exitUsage},
		{[]string{"cidr", "update", "nosuch", "10.7.0.0/29", "fd00:9::/125"}, exitNotFound},
		{[]string{"ip", "release", "10.0.0.1"}, exitOK},
		{[]string{"ip", "release", "10.0.0.1", "10.0.0.2"}, exitNotFound},
		{[]string{"ip", "release", "--parent", "services/default/held"}, exitOK},
		{[]string{"ip", "release", "--parent", "services/default/new"}, exitOK},
	} {
		if r := c.run(append(tc.args, "--dry-run")...); r.code != tc.code {
			t.Errorf("ipamctl %s --dry-run: exit %d, want %d\n%s%s", strings.Join(tc.args, " "), r.code, tc.code, r.stdout, r.stderr)
		}
	}
	for _, read := range [][]string{{"cidr", "get"}, {"cidr", "get", "stranded"}, {"ip", "get"}, {"ip", "get", "--parent", "services/default/held"}, {"ip", "get", "--cidr", "v4"}, {"usage"}} {
		c.ok(read...)
	}
	if after := revision(); after != before {
		t.Errorf("the dry runs took etcd from revision %d to %d", before, after)
	}
	ctx := context.Background()
	for name, terminating := range map[string]bool{"v4": false, "v6": false, "empty": false, "stranded": true} {
		if got, err := st.GetCIDR(ctx, name); err != nil || got.Terminating != terminating || len(got.Prefixes) != 1 {
			t.Errorf("after the dry runs, CIDR %s is %+v, %v; want it single-stack, Terminating: %v", name, got, err, terminating)
		}
	}
	if got, err := st.GetCIDR(ctx, "new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after cidr create new --dry-run, the store holds %+v, %v", got, err)
	}
	if recs, err := st.ListAddresses(ctx); err != nil || len(recs) != 1 || recs[0].Addr != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("after the dry runs, the records are %+v, %v; want 10.0.0.1's only", recs, err)
	}
	// The same command, not a dry run, writes.
	c.ok("ip", "allocate", "10.0.0.2", "--parent", "services/default/new")
	if after := revision(); after == before {
		t.Error("a real ip allocate left etcd at its revision too")
	}
	if _, err := st.GetCIDR(ctx, "stranded"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the stranded CIDR outlived a command that writes: %v", err)
	}
}
