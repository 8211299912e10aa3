package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// bin is the ipamctl binary built once for the tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ipamctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "ipamctl")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the binary with the given store flags prepended, and env
// added to the environment.
type cli struct {
	t     *testing.T
	store []string
	env   []string
	stdin *os.File // nil: none (the null device)
}

func newBoltCLI(t *testing.T) *cli {
	return &cli{t: t, store: []string{"--db", filepath.Join(t.TempDir(), "ipam.db")}}
}

func (c *cli) run(args ...string) result {
	c.t.Helper()
	cmd := exec.Command(bin, append(append([]string{}, c.store...), args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if c.stdin != nil { // not a nil *os.File in the interface
		cmd.Stdin = c.stdin
	}
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		c.t.Fatalf("running ipamctl %v: %v", args, err)
	}
	return r
}

// ok runs a command that must succeed and returns its stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("ipamctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fail runs a command that must exit with code, its stderr naming want.
func (c *cli) fail(code int, want string, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code {
		c.t.Fatalf("ipamctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		c.t.Errorf("ipamctl %s: stderr %q does not say %q", strings.Join(args, " "), r.stderr, want)
	}
	return r
}

func (c *cli) json(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("ipamctl %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (c *cli) allocateNext(parent string) netip.Addr {
	c.t.Helper()
	var o ipObject
	c.json(&o, "ip", "allocate", "--family", "4", "--parent", parent)
	return netip.MustParseAddr(o.Name)
}

// Walkthroughs 8.1 (exhaustion) and 8.2 (deletion) against a bolt file.
func TestWalkthroughsExhaustionAndDeletion(t *testing.T) {
	c := newBoltCLI(t)
	if r := c.run("-v", "cidr", "create", "kubernetes", "10.96.0.0/28"); r.code != 0 || r.stdout != "cidr/kubernetes created\n" || !strings.Contains(r.stderr, "CIDR created") {
		t.Fatalf("create kubernetes: %+v", r)
	}
	if out := c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes"); out != "ipaddress/10.96.0.1 allocated to services/default/kubernetes\n" {
		t.Errorf("static allocation printed %q", out)
	}
	kubernetes := netip.MustParsePrefix("10.96.0.0/28")
	seen := map[netip.Addr]bool{netip.MustParseAddr("10.96.0.1"): true}
	for i := range 13 {
		a := c.allocateNext(fmt.Sprintf("services/default/svc-%d", i))
		if !cidrset.HostContains(kubernetes, a) || seen[a] {
			t.Fatalf("allocation %d: %s (outside %s or repeated)", i, a, kubernetes)
		}
		seen[a] = true
	}
	c.fail(exitFull, "range is full", "ip", "allocate", "--family", "4", "--parent", "services/default/svc-14")

	c.ok("cidr", "create", "newcidr1", "192.96.0.0/24")
	newcidr1 := netip.MustParsePrefix("192.96.0.0/24")
	var moved []netip.Addr
	for i := range 2 {
		a := c.allocateNext(fmt.Sprintf("services/default/new-%d", i))
		if !cidrset.HostContains(newcidr1, a) {
			t.Fatalf("allocation after newcidr1: %s, not from %s", a, newcidr1)
		}
		moved = append(moved, a)
	}
	wantCIDRList(t, c.ok("cidr", "get"), map[string][2]string{
		"kubernetes": {"10.96.0.0/28", "Ready"},
		"newcidr1":   {"192.96.0.0/24", "Ready"},
	})
	usage := c.ok("usage")
	for _, want := range []string{"SIZE", "USED", "FREE", "kubernetes   10.96.0.0/28    14     14     0", "newcidr1     192.96.0.0/24   254    2      252"} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}

	// 8.2: delete newcidr1 while it holds addresses.
	r := c.run("cidr", "delete", "newcidr1")
	if r.code != exitPending {
		t.Fatalf("cidr delete newcidr1: exit %d, want %d\n%+v", r.code, exitPending, r)
	}
	for _, want := range []string{"terminating", "Terminating", cidrset.MessageBlockedDelete, moved[0].String(), moved[1].String()} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("cidr delete output lacks %q:\n%s", want, r.stdout)
		}
	}
	wantCIDRList(t, c.ok("cidr", "get"), map[string][2]string{
		"kubernetes": {"10.96.0.0/28", "Ready"},
		"newcidr1":   {"192.96.0.0/24", "Terminating"},
	})
	get := c.ok("cidr", "get", "newcidr1")
	for _, want := range []string{"Ready:", "False", "Reason:", "Terminating", cidrset.MessageBlockedDelete} {
		if !strings.Contains(get, want) {
			t.Errorf("cidr get newcidr1 lacks %q:\n%s", want, get)
		}
	}
	// The view of one CIDR says its status as the list does.
	if got := fieldOf(get, "Status:"); got != "Terminating" {
		t.Errorf("cidr get newcidr1: Status %q, want Terminating:\n%s", got, get)
	}
	if got := fieldOf(c.ok("cidr", "get", "kubernetes"), "Status:"); got != "Ready" {
		t.Errorf("cidr get kubernetes: Status %q, want Ready", got)
	}
	var obj cidrObject
	c.json(&obj, "cidr", "get", "newcidr1")
	if !obj.Terminating || obj.Conditions[0].Status != "False" || obj.Conditions[0].Reason != "Terminating" || len(obj.Blocking) != 2 {
		t.Errorf("cidr get newcidr1 -o json: %+v", obj)
	}
	// Terminating: it serves nothing new, and kubernetes is full.
	c.fail(exitFull, "range is full", "ip", "allocate", "--family", "4", "--parent", "services/default/late")
	c.fail(exitUsage, "terminating", "ip", "allocate", "192.96.0.200", "--parent", "services/default/late")

	c.ok("ip", "release", moved[0].String())
	if r := c.run("cidr", "get", "newcidr1"); r.code != 0 {
		t.Fatalf("newcidr1 gone while %s holds it: %+v", moved[1], r)
	}
	c.ok("ip", "release", moved[1].String())
	c.fail(exitNotFound, `cidr "newcidr1" not found`, "cidr", "get", "newcidr1")

	var cidrs list[cidrObject]
	c.json(&cidrs, "cidr", "get")
	if len(cidrs.Items) != 1 || cidrs.Items[0].Name != "kubernetes" || cidrs.Items[0].Conditions[0].Message != cidrset.MessageDefaultReady {
		t.Errorf("cidr get -o json: %+v", cidrs)
	}
	var ips list[ipObject]
	c.json(&ips, "ip", "get")
	if len(ips.Items) != 14 || ips.Items[0].Name != "10.96.0.1" || ips.Items[0].ParentRef.Name != "kubernetes" {
		t.Errorf("ip get -o json: %d items, first %+v", len(ips.Items), ips.Items[0])
	}
	if out := c.ok("ip", "get", "10.96.0.1"); !strings.Contains(out, "NAME") || !strings.Contains(out, "PARENTREF") || !strings.Contains(out, "services/default/kubernetes") {
		t.Errorf("ip get 10.96.0.1:\n%s", out)
	}
}

// wantCIDRList checks cidr get's table: the header NAME CIDRS STATUS AGE,
// one row per CIDR of want (name: its CIDRS and STATUS), and every cell
// starting in its header's column.
func wantCIDRList(t *testing.T, out string, want map[string][2]string) {
	t.Helper()
	header := []string{"NAME", "CIDRS", "STATUS", "AGE"}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if got := strings.Fields(lines[0]); !slices.Equal(got, header) {
		t.Fatalf("cidr get: header %q, want %q:\n%s", got, header, out)
	}
	var columns []int
	for _, h := range header {
		columns = append(columns, strings.Index(lines[0], h))
	}
	got := map[string][2]string{}
	for _, l := range lines[1:] {
		cells := strings.Fields(l)
		if len(cells) != len(header) {
			t.Fatalf("cidr get: row %q has %d cells, want %d:\n%s", l, len(cells), len(header), out)
		}
		end := 0
		for i, cell := range cells {
			at := end + strings.Index(l[end:], cell)
			if at != columns[i] {
				t.Errorf("cidr get: %s %q starts at column %d, its header at %d:\n%s", header[i], cell, at, columns[i], out)
			}
			end = at + len(cell)
		}
		got[cells[0]] = [2]string{cells[1], cells[2]}
	}
	if !maps.Equal(got, want) {
		t.Errorf("cidr get lists %v, want %v:\n%s", got, want, out)
	}
}

// 8.2, second half: a CIDR whose addresses a live CIDR covers goes at once.
func TestDeleteOfCoveredCIDRSucceedsAtOnce(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "small", "10.0.0.0/24")
	c.ok("ip", "allocate", "10.0.0.10", "--parent", "services/default/a")
	c.ok("cidr", "create", "big", "10.0.0.0/23")
	if out := c.ok("cidr", "delete", "small"); out != "cidr/small deleted\n" {
		t.Errorf("cidr delete small: %q", out)
	}
	c.fail(exitNotFound, "not found", "cidr", "get", "small")
	var res deleteResult
	c.ok("cidr", "create", "other", "172.16.0.0/24")
	c.json(&res, "cidr", "delete", "other")
	if !res.Deleted {
		t.Errorf("delete -o json: %+v", res)
	}
}

func TestExitCodes(t *testing.T) {
	c := newBoltCLI(t)
	c.fail(exitUsage, "a command is required")
	c.fail(exitUsage, "unknown command", "frobnicate")
	c.fail(exitUsage, `unknown command "cidr": ipamctl cidr takes create, update, get, delete`, "cidr")
	c.fail(exitUsage, `unknown command "ip frob": ipamctl ip takes allocate, get, release`, "ip", "frob")
	c.fail(exitUsage, "unknown flag", "cidr", "get", "--bogus")
	c.fail(exitUsage, "unknown flag --family", "cidr", "get", "--family", "4")
	c.fail(exitUsage, "usage: ipamctl cidr create NAME PREFIX [PREFIX]", "cidr", "create", "x")
	c.fail(exitUsage, "must not have bits set beyond the prefix length", "cidr", "create", "x", "10.0.0.1/24")
	c.fail(exitUsage, "must not have leading 0s", "cidr", "create", "x", "010.0.0.0/24")
	c.fail(exitUsage, "-o \"xml\"", "cidr", "get", "-o", "xml")
	c.ok("cidr", "create", "x", "10.0.0.0/30") // two addresses
	c.fail(exitConflict, "already exists", "cidr", "create", "x", "10.1.0.0/24")
	c.fail(exitUsage, "--parent REF is required", "ip", "allocate", "--family", "4")
	c.fail(exitUsage, "must be of the form", "ip", "allocate", "--family", "4", "--parent", "nonsense")
	c.fail(exitUsage, "--family", "ip", "allocate", "--parent", "services/default/a")
	c.fail(exitUsage, "must be 4, 6 or dual", "ip", "allocate", "--family", "5", "--parent", "services/default/a")
	c.fail(exitUsage, "must be a valid IP address", "ip", "allocate", "10.0.0.300", "--parent", "services/default/a")
	c.fail(exitUsage, "not in the valid range", "ip", "allocate", "10.0.0.3", "--parent", "services/default/a") // broadcast
	c.fail(exitUsage, "does not match the current range", "ip", "allocate", "--family", "6", "--parent", "services/default/a")
	c.ok("ip", "allocate", "10.0.0.1", "--parent", "services/default/a")
	c.fail(exitConflict, "already allocated", "ip", "allocate", "10.0.0.1", "--parent", "services/default/b")
	c.ok("ip", "allocate", "--family=4", "--parent=services/default/b")
	c.fail(exitFull, "range is full", "ip", "allocate", "--family", "4", "--parent", "services/default/c")
	c.fail(exitNotFound, `cidr "nope" not found`, "cidr", "get", "nope")
	c.fail(exitNotFound, `cidr "nope" not found`, "cidr", "delete", "nope")
	c.fail(exitNotFound, `ipaddress "10.0.0.9" not found`, "ip", "get", "10.0.0.9")
	c.fail(exitNotFound, `ipaddress "10.0.0.9" not found`, "ip", "release", "10.0.0.9")
	c.fail(exitUsage, "--db and --etcd", "--etcd", "127.0.0.1:1", "cidr", "get")
	c.fail(exitUsage, "needs --consumers", "repair")
	if out := c.ok("help"); !strings.Contains(out, "Exit codes") {
		t.Errorf("help:\n%s", out)
	}
}

// What the help and the docs say matches what the commands do: ip get
// takes an address or --parent, not both, and every not-found error reads
// the same, cidr update's included.
func TestHelpAndMessagesSayWhatTheCommandsDo(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "single", "10.0.0.0/24")
	c.fail(exitNotFound, `ipamctl: cidr "nope" not found`, "cidr", "update", "nope", "10.1.0.0/24", "fd00:1::/120")

	const ipGet = "ip get [ADDR | --parent REF | --cidr NAME]"
	c.fail(exitUsage, "give an address or --parent, not both", "ip", "get", "10.0.0.1", "--parent", "services/default/a")
	c.fail(exitUsage, "usage: ipamctl "+ipGet, "ip", "get", "10.0.0.1", "10.0.0.2")
	if help := c.ok("help"); !strings.Contains(help, ipGet) {
		t.Errorf("help does not say %q:\n%s", ipGet, help)
	}
	for file, want := range map[string]string{
		"main.go":   "//\t" + ipGet,                                   // the package doc
		"README.md": "`" + strings.ReplaceAll(ipGet, "|", `\|`) + "`", // in a table
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), want) {
			t.Errorf("%s does not say %q", file, want)
		}
	}

	// The commands that create a missing (or empty) --db file are those neither
	// mustExist nor readOnly, as the help, the package doc and the README
	// name them.
	var creators, quoted []string
	for _, cmd := range commands {
		if !cmd.mustExist && !cmd.readOnly {
			creators = append(creators, cmd.name)
			quoted = append(quoted, "`"+cmd.name+"`")
		}
	}
	and := func(s []string) string { return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1] }
	words := func(s string) string { return strings.Join(strings.Fields(strings.ReplaceAll(s, "//", "")), " ") }
	doc, readme := docs(t)
	for what, text := range map[string]string{"help": c.ok("help"), "the package doc": doc, "README.md": readme} {
		want := "created if missing or empty only by " + and(creators) + " without --dry-run"
		if what == "README.md" {
			want = "created if missing or empty by " + and(quoted) + " (not `--dry-run`)"
		}
		if !strings.Contains(words(text), want) {
			t.Errorf("%s does not say %q", what, want)
		}
	}
}

// TestFamilyFlagReadsAlikeWithAndWithoutAnAddress: --family is read the
// same way, in any case, whether ip allocate is given an address or not;
// with one, it must name the address's family. A value that is no family
// is refused alike with or without one, naming the values it may take.
func TestFamilyFlagReadsAlikeWithAndWithoutAnAddress(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "dual", "10.0.0.0/24", "fd00:10::/120")
	for i, fam := range []string{"4", "ipv4", "IPv4", "IPV4"} {
		c.ok("ip", "allocate", fmt.Sprintf("10.0.0.%d", 10+i), "--family", fam, "--parent", "services/default/static")
		c.ok("ip", "allocate", "--family", fam, "--parent", "services/default/dynamic")
	}
	// Hex: fd00:10::a to ::c lie in the /120's static band, where the
	// dynamic allocations between them never land.
	for i, fam := range []string{"6", "ipv6", "IPv6"} {
		c.ok("ip", "allocate", fmt.Sprintf("fd00:10::%x", 10+i), "--family", fam, "--parent", "services/default/static")
		c.ok("ip", "allocate", "--family", fam, "--parent", "services/default/dynamic")
	}
	for _, fam := range []string{"6", "ipv6", "dual"} {
		c.fail(exitUsage, "does not match address", "ip", "allocate", "10.0.0.20", "--family", fam, "--parent", "services/default/static")
	}
	for _, fam := range []string{"5", "7", "ipv5", ""} {
		c.fail(exitUsage, fmt.Sprintf("--family %q: must be 4, 6 or dual", fam), "ip", "allocate", "10.0.0.20", "--family", fam, "--parent", "services/default/static")
		c.fail(exitUsage, fmt.Sprintf("--family %q: must be 4, 6 or dual", fam), "ip", "allocate", "--family", fam, "--parent", "services/default/dynamic")
	}
	var ips list[ipObject]
	c.json(&ips, "ip", "get", "--parent", "services/default/static")
	if len(ips.Items) != 7 {
		t.Fatalf("services/default/static holds %d addresses, want 7: %+v", len(ips.Items), ips.Items)
	}
}

// ip allocate --ensure, run again, prints the address REF holds of each
// family, allocating nothing more; with dual, a REF holding neither gets
// both or neither, and one holding one keeps it.
func TestIPAllocateEnsureGivesARetriedRunTheSameAddresses(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "v4", "10.0.0.0/29")
	ensure := []string{"ip", "allocate", "--parent", "pods/default/a", "--ensure", "--family"}
	var first, again ipObject
	c.json(&first, append(ensure, "4")...)
	c.json(&again, append(ensure, "4")...)
	if first.Name == "" || again.Name != first.Name {
		t.Fatalf("--ensure twice: %s, then %s; want one address", first.Name, again.Name)
	}
	// No IPv6 CIDR yet: the IPv4 address stands, and stderr says so; an
	// owner holding none gets none.
	r := c.fail(exitUsage, "does not match the current range", append(ensure, "dual")...)
	if want := "pods/default/a holds " + first.Name + "; allocating its IPv6 address"; !strings.Contains(r.stderr, want) {
		t.Errorf("dual, no IPv6 CIDR: stderr %q, want it to say %q", r.stderr, want)
	}
	c.fail(exitUsage, "does not match the current range", "ip", "allocate", "--parent", "pods/default/none", "--ensure", "--family", "dual")
	var none list[ipObject]
	c.json(&none, "ip", "get", "--parent", "pods/default/none")
	if len(none.Items) != 0 {
		t.Errorf("dual --ensure failed on IPv6, yet the owner holds %+v", none.Items)
	}
	c.ok("cidr", "create", "v6", "fd00::/125")
	var pair, held list[ipObject]
	c.json(&pair, append(ensure, "dual")...)
	if len(pair.Items) != 2 || pair.Items[0].Name != first.Name || pair.Items[1].Family != "IPv6" {
		t.Fatalf("dual --ensure for an owner holding %s: %+v", first.Name, pair.Items)
	}
	c.json(&held, append(ensure, "dual")...)
	if len(held.Items) != 2 || held.Items[0].Name != first.Name || held.Items[1].Name != pair.Items[1].Name {
		t.Fatalf("dual --ensure again: %+v, want %+v", held.Items, pair.Items)
	}
	c.json(&held, "ip", "get", "--parent", "pods/default/a")
	if len(held.Items) != 2 {
		t.Errorf("the owner holds %+v after every --ensure: want its pair only", held.Items)
	}
	// A static address (of a CIDR the dynamic runs above left alone): REF
	// holding it already is no error; another owner still is.
	c.ok("cidr", "create", "static", "10.1.0.0/29")
	static := []string{"ip", "allocate", "10.1.0.3", "--parent", "pods/default/b", "--ensure"}
	var made, kept ipObject
	c.json(&made, static...)
	c.json(&kept, static...)
	if made.Name != "10.1.0.3" || kept.Name != made.Name || !kept.Created.Equal(made.Created) {
		t.Errorf("a static --ensure twice: %+v, then %+v", made, kept)
	}
	c.fail(exitConflict, "already allocated", static[:len(static)-1]...) // without --ensure
	c.fail(exitConflict, "already allocated", "ip", "allocate", "10.1.0.3", "--parent", "pods/default/c", "--ensure")
}

func TestOwnerWideGetAndRelease(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "dual", "10.0.0.0/24", "fd00:10::/120")
	out := c.ok("ip", "allocate", "--family", "dual", "--parent", "services/default/both")
	if strings.Count(out, "allocated to services/default/both") != 2 {
		t.Fatalf("dual allocation: %q", out)
	}
	c.ok("ip", "allocate", "10.0.0.5", "--parent", "services/default/other")
	var ips list[ipObject]
	c.json(&ips, "ip", "get", "--parent", "services/default/both")
	if len(ips.Items) != 2 || ips.Items[0].Family != "IPv4" || ips.Items[1].Family != "IPv6" {
		t.Fatalf("ip get --parent: %+v", ips)
	}
	var rel struct{ Released []string }
	c.json(&rel, "ip", "release", "--parent", "services/default/both")
	if len(rel.Released) != 2 {
		t.Errorf("released %v", rel.Released)
	}
	c.json(&ips, "ip", "get")
	if len(ips.Items) != 1 || ips.Items[0].Name != "10.0.0.5" {
		t.Errorf("left: %+v", ips.Items)
	}
	// Released again, the owner holds none: done, and said so.
	for _, out := range []string{"table", "json"} {
		r := c.run("ip", "release", "--parent", "services/default/both", "-o", out)
		if r.code != 0 || r.stderr != "ipamctl: services/default/both holds no address: nothing released\n" {
			t.Errorf("-o %s, an owner holding none: exit %d, stderr %q", out, r.code, r.stderr)
		}
		if want := map[string]string{"table": "", "json": `{"released":[]}`}[out]; strings.Join(strings.Fields(r.stdout), "") != want {
			t.Errorf("-o %s, an owner holding none: stdout %q, want %q", out, r.stdout, want)
		}
	}
}

func TestYAMLOutput(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/28", "fd00:10::/108")
	out := c.ok("cidr", "get", "kubernetes", "-o", "yaml")
	for _, want := range []string{"name: kubernetes\n", "cidrs:\n- \"10.96.0.0/28\"\n- fd00:10::/108\n", "conditions:\n- type: Ready\n  status: \"True\"\n  message: Kubernetes default Service CIDR is ready\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("yaml lacks %q:\n%s", want, out)
		}
	}
	out = c.ok("usage", "-o", "yaml")
	if !strings.Contains(out, "size: 1048575\n") || !strings.Contains(out, "size: 14\n") {
		t.Errorf("usage yaml:\n%s", out)
	}
}

func TestJSONToYAML(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,"b":"x y","c":[],"d":{},"e":null,"f":true}`, "a: 1\nb: x y\nc: []\nd: {}\ne: null\nf: true\n"},
		{`{"items":[{"name":"a","l":["1","b"]},"s"]}`, "items:\n- name: a\n  l:\n  - \"1\"\n  - b\n- s\n"},
		{`{"s":["true","","a: b","a #b","2001:db8::1","ok/x-1.2","n"]}`, "s:\n- \"true\"\n- \"\"\n- \"a: b\"\n- \"a #b\"\n- \"2001:db8::1\"\n- ok/x-1.2\n- \"n\"\n"},
		{`{"big":340282366920938463463374607431768211455}`, "big: 340282366920938463463374607431768211455\n"},
		{`"top"`, "top\n"},
		// Runes JSON leaves raw that YAML may not hold, or reads as a line
		// break or a byte order mark, are escaped.
		{`{"s":"a\u007fb\u0085c\u009f\ufeff\ufffe\uffffé"}`, `s: "a\u007Fb\u0085c\u009F\uFEFF\uFFFE\uFFFFé"` + "\n"},
	} {
		got, err := jsonToYAML([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("jsonToYAML(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// repair from the CLI, with a consumers file.
func TestRepairWithConsumersFile(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/24")
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes")
	c.ok("ip", "allocate", "10.96.0.50", "--parent", "services/default/gone")
	file := filepath.Join(t.TempDir(), "consumers.json")
	consumers := `[
  {"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"]},
  {"parentRef": {"resource": "services", "namespace": "kube-system", "name": "kube-dns"}, "addresses": ["10.96.0.10"]},
  {"parentRef": "services/default/broken", "addresses": ["10.96.0.999", "192.168.0.1"]}
]`
	if err := os.WriteFile(file, []byte(consumers), 0o600); err != nil {
		t.Fatal(err)
	}
	// Fresh records are within the grace: the leak is pending.
	var rep repairReport
	c.json(&rep, "repair", "--consumers", file, "--dry-run")
	kinds := func() map[string]int {
		m := map[string]int{}
		for _, e := range rep.Events {
			m[e.Kind]++
		}
		return m
	}
	if k := kinds(); !rep.DryRun || k["LeakPending"] != 1 || k["Repaired"] != 1 || k["Invalid"] != 1 || k["OutOfRange"] != 1 || rep.RetryAfter == "" {
		t.Fatalf("dry run: %+v", rep)
	}
	c.fail(exitNotFound, "not found", "ip", "get", "10.96.0.10") // dry run changed nothing

	rep = repairReport{}
	c.json(&rep, "repair", "--consumers", file, "--leak-grace", "0s")
	if k := kinds(); rep.DryRun || k["Leak"] != 1 || k["Repaired"] != 1 {
		t.Fatalf("repair: %+v", rep)
	}
	var ip ipObject
	c.json(&ip, "ip", "get", "10.96.0.10")
	if ip.ParentRef.Namespace != "kube-system" || ip.ParentRef.Name != "kube-dns" {
		t.Errorf("repaired record: %+v", ip)
	}
	c.fail(exitNotFound, "not found", "ip", "get", "10.96.0.50")
	out := c.ok("repair", "--consumers", file)
	if !strings.Contains(out, "2 findings") || !strings.Contains(out, "Invalid") || !strings.Contains(out, "ClusterIPOutOfRange") {
		t.Errorf("table repair output:\n%s", out)
	}
	c.fail(exitUsage, "--consumers", "repair", "--consumers", "/nonexistent/file.json")
}

// A misspelt or missing key in the consumers file would read as an owner
// holding nothing, whose records repair then deletes: it is refused, and
// nothing is deleted.
func TestRepairRefusesAConsumersFileItCouldMisread(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/24")
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes")
	for name, consumers := range map[string]string{
		"misspelt addresses": `[{"parentRef": "services/default/kubernetes", "address": ["10.96.0.1"]}]`,
		"missing addresses":  `[{"parentRef": "services/default/kubernetes"}]`,
		"misspelt owner key": `[{"parentRef": {"resource": "services", "namespace": "default", "nmae": "kubernetes"}, "addresses": ["10.96.0.1"]}]`,
		"an unknown key":     `[{"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"], "ports": [443]}]`,
		"trailing data":      `[{"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"]}] []`,
		// What jq gives for a misspelt key, and json.Marshal for a nil slice.
		"null":         "null\n",
		"a null entry": `[null]`,
		// Of a key given twice, encoding/json keeps the last; it matches
		// keys ignoring case, and folds "ſ" to "s".
		"addresses twice":         `[{"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"], "addresses": []}]`,
		"addresses twice, cased":  `[{"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"], "Addresses": []}]`,
		"addresses twice, folded": `[{"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"], "addreſſes": []}]`,
		"owner name twice":        `[{"parentRef": {"resource": "services", "namespace": "default", "name": "kubernetes", "Name": "other"}, "addresses": ["10.96.0.1"]}]`,
	} {
		file := filepath.Join(t.TempDir(), "consumers.json")
		if err := os.WriteFile(file, []byte(consumers), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Log(name)
		c.fail(exitUsage, "--consumers", "repair", "--consumers", file, "--leak-grace", "0s")
	}
	c.ok("ip", "get", "10.96.0.1")
}

// repair's "run again in D" (retryAfter in JSON) is never earlier than the
// first pending record can be decided: it rounds up to whole seconds.
func TestRepairRetryAfterIsNeverEarly(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Nanosecond:                       "1s",
		300 * time.Millisecond:                "1s",
		time.Second:                           "1s",
		time.Second + 1:                       "2s",
		59*time.Second + 400*time.Millisecond: "1m0s",
		time.Minute + time.Second/2:           "1m1s",
	} {
		if got := roundUp(d).String(); got != want {
			t.Errorf("roundUp(%v) = %s, want %s", d, got, want)
		}
	}

	// Waiting what it says, then running again, decides the record. A
	// first pass that comes over 0.3s late finds the grace over and has
	// nothing to wait for; a loaded machine gets a few more tries.
	for try := 1; ; try++ {
		if retryAfterDecides(t) {
			return
		}
		if try == 5 {
			t.Fatal("every first pass came after the grace: the check never ran")
		}
	}
}

// retryAfterDecides runs a repair pass into a leak's grace and another
// after the wait it reports, and checks the second decides the leak. It
// returns false, checking nothing, when the first pass came too late.
func retryAfterDecides(t *testing.T) bool {
	t.Helper()
	c, file := oneLeak(t)
	time.Sleep(700 * time.Millisecond) // into the 1s grace, past its half
	var rep repairReport
	c.json(&rep, "repair", "--consumers", file, "--leak-grace", "1s", "--dry-run")
	switch {
	case len(rep.Events) == 1 && rep.Events[0].Kind == "Leak":
		t.Logf("the first pass came after the grace: %+v", rep)
		return false
	case len(rep.Events) != 1 || rep.Events[0].Kind != "LeakPending":
		t.Fatalf("first pass: %+v", rep)
	}
	wait, err := time.ParseDuration(rep.RetryAfter)
	if err != nil || wait%time.Second != 0 {
		t.Fatalf("retryAfter %q: %v, want whole seconds", rep.RetryAfter, err)
	}
	time.Sleep(wait)
	var again repairReport
	c.json(&again, "repair", "--consumers", file, "--leak-grace", "1s", "--dry-run")
	if len(again.Events) != 1 || again.Events[0].Kind != "Leak" {
		t.Errorf("retryAfter %q, waited that, ran again: %+v", rep.RetryAfter, again.Events)
	}
	return true
}

// The addresses holding a CIDR are listed up to 16; a longer list says that
// there are more, and one of exactly 16 does not, in cidr delete and cidr
// get, in the table and in JSON.
func TestABlockingListSaysWhenItIsCut(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "twenty", "10.2.0.0/24")
	c.ok("cidr", "create", "sixteen", "10.1.0.0/24")
	for i := 1; i <= 20; i++ {
		c.ok("ip", "allocate", fmt.Sprintf("10.2.0.%d", i), "--parent", fmt.Sprintf("services/default/t%d", i))
		if i <= 16 {
			c.ok("ip", "allocate", fmt.Sprintf("10.1.0.%d", i), "--parent", fmt.Sprintf("services/default/s%d", i))
		}
	}
	for name, more := range map[string]bool{"twenty": true, "sixteen": false} {
		r := c.fail(exitPending, "", "cidr", "delete", name)
		if got := strings.Contains(r.stdout, "and more"); got != more {
			t.Errorf("cidr delete %s says more: %v, want %v\n%s", name, got, more, r.stdout)
		}
		r = c.fail(exitPending, "", "cidr", "delete", name, "-o", "json")
		var del deleteResult
		if err := json.Unmarshal([]byte(r.stdout), &del); err != nil {
			t.Fatal(err)
		}
		if len(del.Blocking) != 16 || del.MoreBlocking != more {
			t.Errorf("cidr delete %s -o json: %d blocking, more %v; want 16, %v", name, len(del.Blocking), del.MoreBlocking, more)
		}
		if got := strings.Contains(c.ok("cidr", "get", name), "and more"); got != more {
			t.Errorf("cidr get %s says more: %v, want %v", name, got, more)
		}
		var o cidrObject
		c.json(&o, "cidr", "get", name)
		if len(o.Blocking) != 16 || o.MoreBlocking != more {
			t.Errorf("cidr get %s -o json: %d blocking, more %v; want 16, %v", name, len(o.Blocking), o.MoreBlocking, more)
		}
	}
}

// The command line refuses what it would otherwise take for something
// else: a read on a mistyped --db path (it would show an empty store), an
// update with one prefix (a no-op reported as done), an empty name.
func TestTheCommandLineRefusesWhatItWouldMisread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.db")
	c := &cli{t: t, store: []string{"--db", path}}
	for _, cmd := range [][]string{{"cidr", "get"}, {"ip", "get"}, {"usage"}} {
		c.fail(exitError, "no store at", cmd...)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a read created %s: %v", path, err)
	}
	c.ok("cidr", "create", "single", "10.1.0.0/24")
	c.fail(exitUsage, "usage: ipamctl cidr update NAME PREFIX PREFIX", "cidr", "update", "single", "10.1.0.0/24")
	c.fail(exitUsage, "an argument is empty", "cidr", "get", "")
	c.fail(exitUsage, "an argument is empty", "cidr", "delete", "")
	c.fail(exitUsage, "must be table, wide, json or yaml", "cidr", "get", "-o", "xml")
	help := c.ok("help")
	for _, f := range append(globalFlags, etcdPasswordEnv) {
		switch f {
		case "help", "v", "output": // -h, -v, -o
		default:
			if !strings.Contains(help, f) {
				t.Errorf("help does not name %s:\n%s", f, help)
			}
		}
	}
}

// The commands that act on what a store holds (ip release, cidr delete,
// cidr update) refuse a missing --db file as the reads do, exit 1, rather
// than create an empty store there and answer "not found" (exit 3), which
// a script takes for "already released" or "already deleted". On the
// store, they still write.
func TestACommandOnWhatTheStoreHoldsRefusesAMissingDBFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo.db")
	typo := &cli{t: t, store: []string{"--db", missing}}
	for _, cmd := range [][]string{
		{"ip", "release", "10.96.0.2"},
		{"ip", "release", "--parent", "services/default/a"},
		{"cidr", "delete", "kubernetes"},
		{"cidr", "update", "kubernetes", "10.96.0.0/24", "fd00::/120"},
		{"cidr", "get"}, // a read, for the message they share
	} {
		typo.fail(exitError, "no store at "+missing+" (this command does not create one; check --db)", cmd...)
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%v created %s: %v", cmd, missing, err)
		}
	}

	c := newBoltCLI(t)
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/24")
	c.ok("ip", "allocate", "10.96.0.2", "--parent", "services/default/a")
	c.ok("ip", "allocate", "10.96.0.3", "--parent", "services/default/b")
	c.ok("ip", "release", "10.96.0.2")
	c.ok("ip", "release", "--parent", "services/default/b")
	c.ok("cidr", "update", "kubernetes", "10.96.0.0/24", "fd00::/120")
	c.ok("cidr", "delete", "kubernetes")
	c.fail(exitNotFound, "not found", "cidr", "get", "kubernetes")
}

// Every argument and flag is checked before the store is opened: a bad
// one exits 2 having created no --db file, without waiting for another
// process's lock, and without contacting etcd. A repair dry run opens the
// file read-only, as the other commands that write nothing do.
func TestBadInputIsRefusedBeforeTheStoreIsOpened(t *testing.T) {
	dir := t.TempDir()
	consumers := filepath.Join(dir, "consumers.json")
	if err := os.WriteFile(consumers, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := [][]string{
		{"cidr", "create", "x", "10.0.0.1/24"},
		{"cidr", "create", "Not_A_Name", "10.0.0.0/24"},
		{"cidr", "update", "x", "10.0.0.0/24", "fd00::/200"},
		{"ip", "allocate", "--family", "4", "--parent", "nonsense"},
		{"ip", "allocate", "--family", "5", "--parent", "services/default/a"},
		{"ip", "allocate", "10.0.0.300", "--parent", "services/default/a"},
		{"ip", "allocate", "10.0.0.1", "--family", "6", "--parent", "services/default/a"},
		{"ip", "get", "10.0.0.1", "--parent", "services/default/a"},
		{"ip", "release", "10.0.0.1", "10.0.0.300"},
		{"ip", "release", "--parent", "nonsense"},
		{"repair", "--consumers", consumers, "--leak-grace", "soon"},
		{"usage", "--lock-timeout", "soon"},
	}
	missing := filepath.Join(dir, "typo.db")
	for _, args := range bad {
		(&cli{t: t, store: []string{"--db", missing}}).fail(exitUsage, "", args...)
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v, refused as invalid, created %s", args, missing)
			os.Remove(missing)
		}
	}

	// Another process holds the lock: it is never waited for. (Were it,
	// --timeout would end the wait with exit 1.)
	db := filepath.Join(dir, "ipam.db")
	// The store is made without locked's --timeout, which is for the
	// commands refused: a write with its fsyncs may take longer than 2s
	// on a busy disk.
	(&cli{t: t, store: []string{"--db", db}}).ok("cidr", "create", "kubernetes", "10.96.0.0/24")
	locked := &cli{t: t, store: []string{"--db", db, "--lock-timeout", "1m", "--timeout", "2s"}}
	held, err := bolt.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range bad {
		locked.fail(exitUsage, "", args...)
	}
	held.Close()

	// Nothing answers at this etcd endpoint: were it contacted, that
	// would be the error, exit 1.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	unreachable := &cli{t: t, store: []string{"--etcd", addr}}
	for _, args := range bad {
		unreachable.fail(exitUsage, "", args...)
	}
	// So are bad etcd flags, before a consumers pipe nobody writes to is
	// read: were it read first, --timeout would end the wait, exit 1.
	const mixedTLS = "some endpoints are reached over TLS and some not"
	fifo := filepath.Join(dir, "consumers.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	for _, c := range []struct {
		store []string
		want  string
	}{
		// The prefix named once, by the flag: not again by the store's error.
		{[]string{"--etcd", addr, "--etcd-prefix", "/netipam/v1/ips/x"}, `--etcd-prefix "/netipam/v1/ips/x": must not be inside another store's records`},
		{[]string{"--etcd", "http://" + addr + ",https://" + addr}, mixedTLS},
		{[]string{"--etcd", "unixs:///run/etcd.sock,https://" + addr + ",unix:///run/etcd2.sock"}, mixedTLS},
		{[]string{"--etcd", "HTTP://" + addr + ",https://" + addr}, mixedTLS},
		// A bare HOST:PORT is reached without TLS when no TLS flag is given.
		{[]string{"--etcd", addr + ",https://" + addr}, mixedTLS},
	} {
		(&cli{t: t, store: append(c.store, "--timeout", "2s")}).fail(exitUsage, c.want, "repair", "--consumers", fifo)
	}

	// repair --dry-run reads: it does not create a mistyped --db...
	c := &cli{t: t, store: []string{"--db", missing}}
	c.fail(exitError, "no store at", "repair", "--consumers", consumers, "--dry-run")
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("repair --dry-run created %s", missing)
	}
	// ...and takes a shared lock, beside another reader's.
	reader, err := bolt.Open(db, bolt.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var rep repairReport
	(&cli{t: t, store: []string{"--db", db, "--lock-timeout", "0"}}).json(&rep, "repair", "--consumers", consumers, "--dry-run")
	if !rep.DryRun || rep.Records != 0 {
		t.Errorf("repair --dry-run beside a reader: %+v", rep)
	}
}

// A command's own input and the wait for another process's lock are
// bounded by --timeout (and Ctrl-C), and repair reads its consumers from a
// pipe before it locks the file, so a slow producer blocks no one else.
func TestWaitsAreBoundedAndHoldNoLock(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ipam.db")
	c := &cli{t: t, store: []string{"--db", db}}
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/24")

	// repair waits for its consumers on a pipe, holding no lock.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	repairing := exec.Command(bin, "--db", db, "repair", "--consumers", "-", "-o", "json")
	var repOut, repErr bytes.Buffer
	repairing.Stdin, repairing.Stdout, repairing.Stderr = pr, &repOut, &repErr
	if err := repairing.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	time.Sleep(200 * time.Millisecond) // long enough to have locked the file, had it wanted to
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes", "--lock-timeout", "0")
	if _, err := pw.WriteString(`[{"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"]}]`); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := repairing.Wait(); err != nil {
		t.Fatalf("repair: %v\n%s", err, repErr.String())
	}
	var rep repairReport
	if err := json.Unmarshal(repOut.Bytes(), &rep); err != nil || rep.Consumers != 1 || len(rep.Events) != 0 {
		t.Fatalf("repair after its input came: %+v, %v\n%s", rep, err, repOut.String())
	}

	// What ends each wait is --timeout: the error says "timed out after
	// 300ms", which only its deadline gives (the default --timeout is 30s,
	// and --lock-timeout gives up saying another process holds the file
	// lock). The process also ends
	// long before anything else would have ended the wait: never, for the
	// input, and --lock-timeout's minute, for the lock. The wall clock
	// counts the process's start and exit too, which --timeout does not
	// bound and a loaded machine stretches to seconds, so it is held to
	// maxWait, a third of that minute, not to a few times 300ms.
	const timedOut = "timed out after 300ms"
	const maxWait = 20 * time.Second

	// --timeout ends a wait for input that does not come...
	pr, pw, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	start := time.Now()
	waiting := exec.Command(bin, "--db", db, "repair", "--consumers", "-", "--timeout", "300ms")
	waiting.Stdin = pr
	out, err := waiting.CombinedOutput()
	inputTook := time.Since(start)
	pr.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitError || !strings.Contains(string(out), timedOut) {
		t.Fatalf("repair with no input and --timeout 300ms: %v\n%s", err, out)
	}
	// ...and a wait for the lock, however long --lock-timeout allows.
	held, err := bolt.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	start = time.Now()
	c.fail(exitError, timedOut, "usage", "--lock-timeout", "1m", "--timeout", "300ms")
	lockTook := time.Since(start)
	if inputTook > maxWait || lockTook > maxWait {
		t.Fatalf("waits bounded at 300ms ended after %v (input) and %v (lock), want each within %v", inputTook, lockTook, maxWait)
	}
	c.fail(exitUsage, "--lock-timeout", "usage", "--lock-timeout", "-1s")
}

// A --consumers file that is a FIFO, or bash's <(...), which is a pipe, is
// waited for within --timeout, and Ctrl-C ends the wait: the wait for a
// writer to open it as well as the wait for what it writes.
func TestTimeoutAndInterruptBoundReadingAConsumersFIFO(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ipam.db")
	fifo := filepath.Join(dir, "consumers.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// Both waits last forever unless ipamctl ends them: the test's own
	// bound is only for a failure to show as one rather than as a hang,
	// so it is far beyond what two runs of ipamctl take on a loaded
	// machine (seconds), and beyond the default --timeout (30s), which
	// would end an interrupted run that Ctrl-C failed to end as "timed
	// out", not "canceled".
	const guard = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	ended := func(cmd *exec.Cmd, err error, out []byte, want string) {
		t.Helper()
		var ee *exec.ExitError
		switch {
		case ctx.Err() != nil:
			t.Fatalf("ipamctl %v still waiting after %v, killed by the test: %s", cmd.Args[1:], guard, out)
		case !errors.As(err, &ee) || ee.ExitCode() != exitError || !strings.Contains(string(out), want):
			t.Fatalf("ipamctl %v: %v, want exit %d saying %q: %s", cmd.Args[1:], err, exitError, want, out)
		}
	}

	// Nobody opens the FIFO to write: open(2) itself blocks.
	timed := exec.CommandContext(ctx, bin, "--db", db, "repair", "--consumers", fifo, "--timeout", "300ms")
	out, err := timed.CombinedOutput()
	ended(timed, err, out, "timed out")

	// A writer that writes nothing, and Ctrl-C.
	interrupted := exec.CommandContext(ctx, bin, "--db", db, "repair", "--consumers", fifo)
	var buf bytes.Buffer
	interrupted.Stdout, interrupted.Stderr = &buf, &buf
	if err := interrupted.Start(); err != nil {
		t.Fatal(err)
	}
	// Opening a FIFO to write without blocking succeeds only once a reader
	// has it open: ipamctl is then past main's signal handling and its own
	// open, and waits for data that does not come.
	var w *os.File
	for {
		if w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			break
		}
		if !errors.Is(err, syscall.ENXIO) || ctx.Err() != nil {
			t.Fatalf("opening %s to write: %v", fifo, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer w.Close()
	if err := interrupted.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = interrupted.Wait()
	ended(interrupted, err, buf.Bytes(), "canceled")
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("repair, its input never read, created %s: %v", db, err)
	}
}

// What would otherwise go to the wrong file, or change a file a command
// only reads, is refused.
func TestReadsChangeNothingAndAnEmptyDBFlagIsRefused(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(bin, "--db", "", "cidr", "create", "x", "10.0.0.0/24")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), `--db ""`) {
		t.Fatalf(`--db "": %v\n%s`, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "ipam.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf(`--db "" created ./ipam.db: %v`, err)
	}
	etcdEmpty := &cli{t: t, store: []string{"--etcd", "127.0.0.1:9", "--etcd-prefix", ""}}
	etcdEmpty.fail(exitUsage, `--etcd-prefix ""`, "usage")

	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cli{t: t, store: []string{"--db", empty}}
	for _, read := range [][]string{{"usage"}, {"cidr", "get"}, {"ip", "get"}} {
		c.fail(exitError, "not a netipam store", read...)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Fatalf("a read wrote to an empty file (%v)", err)
	}
}

// -o "" (an unset variable in -o "$FORMAT") is refused, exit 2, as
// --db "" is, rather than read as the table a script did not ask for.
func TestAnEmptyOutputFormatIsRefused(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/24")
	for _, args := range [][]string{{"cidr", "get", "-o", ""}, {"usage", "--output="}, {"-o=", "ip", "get"}} {
		if r := c.fail(exitUsage, `-o "": no format named`, args...); r.stdout != "" {
			t.Errorf("%v printed %q", args, r.stdout)
		}
	}
}

// A CIDR of more than two prefixes is refused with SPEC §1's message,
// cidrset's, by cidr create and cidr update alike, before the store is
// opened: it is invalid input, not a command line of the wrong shape.
func TestMoreThanTwoPrefixesAreRefusedWithTheSpecsMessage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo.db")
	c := &cli{t: t, store: []string{"--db", missing}}
	const want = `spec.cidrs: Invalid value: "10.0.0.0/24, fd00::/64, 10.1.0.0/24": may only hold up to 2 values`
	for _, cmd := range []string{"create", "update"} {
		r := c.fail(exitUsage, want, "cidr", cmd, "x", "10.0.0.0/24", "fd00::/64", "10.1.0.0/24")
		if strings.Contains(r.stderr, "Usage:") {
			t.Errorf("cidr %s with three prefixes prints the usage:\n%s", cmd, r.stderr)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("created %s: %v", missing, err)
	}
}

// usage, as the README says: an IPv6 prefix holding the IPv4-mapped block
// (::/80 and wider) leaves its 2^32 addresses out of FREE, and -o json
// prints the counts as exact JSON numbers, 128-bit ones included.
func TestUsageLeavesTheIPv4MappedBlockOutOfFree(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "all", "::/0")
	c.ok("cidr", "create", "wide", "::/80")
	c.ok("cidr", "create", "plain", "fd00::/64")
	want := map[string][2]string{ // SIZE, FREE
		"::/0":      {"340282366920938463463374607431768211455", "340282366920938463463374607427473244159"},
		"::/80":     {"281474976710655", "281470681743359"},
		"fd00::/64": {"18446744073709551615", "18446744073709551615"},
	}
	out := c.ok("usage")
	for p, w := range want {
		if !regexp.MustCompile(`\n\w+ +` + regexp.QuoteMeta(p) + ` +` + w[0] + ` +0 +` + w[1] + ` +Ready\n`).MatchString(out) {
			t.Errorf("usage: %s, want SIZE %s and FREE %s:\n%s", p, w[0], w[1], out)
		}
	}
	out = c.ok("usage", "-o", "json")
	d := json.NewDecoder(strings.NewReader(out))
	d.UseNumber()
	var l list[cidrUsage]
	if err := d.Decode(&l); err != nil {
		t.Fatalf("usage -o json: %v\n%s", err, out)
	}
	for _, cu := range l.Items {
		for _, pu := range cu.Prefixes {
			if w := want[pu.Prefix]; string(pu.Size) != w[0] || string(pu.Free) != w[1] {
				t.Errorf("usage -o json: %s: size %s, free %s; want %s, %s", pu.Prefix, pu.Size, pu.Free, w[0], w[1])
			}
		}
	}
	if !strings.Contains(out, `"size": 340282366920938463463374607431768211455,`) {
		t.Errorf("usage -o json does not print ::/0's size as a JSON number:\n%s", out)
	}
}

// A CIDR name, or a set of prefixes, that no CIDR can have is refused
// before the store is opened, by every cidr command and ip get --cidr:
// exit 2, and no --db file created. A CIDR is created or updated only
// under a name cidrset validates; one is looked up or deleted under any
// name a store can hold (store.CheckCIDRName), so only a name with a "/",
// an empty one or one too long for any store is refused there.
func TestAnInvalidCIDRNameIsRefusedBeforeTheStoreIsOpened(t *testing.T) {
	tooLong := strings.Repeat("a", store.MaxCIDRNameLen+1)
	for _, args := range [][]string{
		{"cidr", "create", "Not_A_Name", "10.0.0.0/24"},
		{"cidr", "update", "Not_A_Name", "10.0.0.0/24", "fd00::/64"},
		{"cidr", "delete", "a/b"},
		{"cidr", "get", "a/b"},
		{"ip", "get", "--cidr", "a/b"},
		{"cidr", "delete", tooLong},
		{"cidr", "get", tooLong},
		{"ip", "get", "--cidr", tooLong},
		{"cidr", "delete", ""},
		{"cidr", "get", ""},
		{"ip", "get", "--cidr", ""},
		// Two prefixes of one family: no CIDR can be that.
		{"cidr", "update", "x", "10.0.0.0/24", "10.1.0.0/24"},
	} {
		missing := filepath.Join(t.TempDir(), "typo.db")
		r := (&cli{t: t, store: []string{"--db", missing}}).run(args...)
		if _, err := os.Stat(missing); r.code != exitUsage || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: exit %d (stderr %q), file stat %v; want exit 2 and no file", args, r.code, r.stderr, err)
		}
	}
}

// A CIDR a store holds under a name that cidr create refuses (not a
// DNS-1123 subdomain: written by an embedder straight to the store, or a
// key edited by hand in etcd) is listed by cidr get, serves allocations,
// and so is shown by cidr get NAME, listed by ip get --cidr NAME and
// deleted by cidr delete NAME like any other; cidr create and cidr
// update still refuse the name.
func TestACIDRTheStoreHoldsIsManagedWhateverItsName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.db")
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	const name = "Legacy_1"
	if _, err := st.CreateCIDR(context.Background(), cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.7.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	c := &cli{t: t, store: []string{"--db", path}}
	wantCIDRList(t, c.ok("cidr", "get"), map[string][2]string{name: {"10.7.0.0/24", "Ready"}})
	c.ok("ip", "allocate", "10.7.0.5", "--parent", "services/default/a")
	if got := fieldOf(c.ok("cidr", "get", name), "Name:"); got != name {
		t.Errorf("cidr get %s: Name %q", name, got)
	}
	var ips list[ipObject]
	c.json(&ips, "ip", "get", "--cidr", name)
	if len(ips.Items) != 1 || ips.Items[0].Name != "10.7.0.5" {
		t.Errorf("ip get --cidr %s: %+v", name, ips.Items)
	}
	c.fail(exitPending, "", "cidr", "delete", name) // held by 10.7.0.5
	c.ok("ip", "release", "10.7.0.5")               // the last holder: the CIDR goes with it
	c.fail(exitNotFound, `cidr "Legacy_1" not found`, "cidr", "get", name)
	c.fail(exitNotFound, `cidr "Legacy_1" not found`, "cidr", "delete", name)
	c.fail(exitNotFound, `cidr "Legacy_1" not found`, "ip", "get", "--cidr", name)
	c.fail(exitUsage, "metadata.name", "cidr", "create", name, "10.7.0.0/24")
	c.fail(exitUsage, "metadata.name", "cidr", "update", name, "10.7.0.0/24", "fd00:7::/120")
}

// A table cell holding text a store was given directly (a CIDR name with
// a tab, an owner with an escape sequence: a store edited by hand, or an
// embedder's write) is quoted, so that it can neither forge a column nor
// reach the terminal; printable text, spaces included, stays as written.
func TestATableQuotesCellsThatAreNotPrintable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.db")
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const name = "odd\tname"
	c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.7.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "\x1b[2Jevil"}
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.7.0.5"), Parent: owner}}, store.Fence{CIDR: name, Revision: c.Revision}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	cl := &cli{t: t, store: []string{"--db", path}}
	for _, args := range [][]string{{"cidr", "get"}, {"ip", "get"}, {"usage"}} {
		out := cl.ok(args...)
		if strings.ContainsAny(out, "\t\x1b") {
			t.Errorf("ipamctl %s writes a tab or an escape:\n%q", strings.Join(args, " "), out)
		}
	}
	if out := cl.ok("cidr", "get"); !strings.Contains(out, strconv.Quote(name)+" ") {
		t.Errorf("cidr get does not quote the name %q:\n%s", name, out)
	}
	if out := cl.ok("ip", "get"); !strings.Contains(out, strconv.Quote(owner.String())) {
		t.Errorf("ip get does not quote the owner %q:\n%s", owner, out)
	}
}

// ip release ADDR... releases every address that has a record, going on
// past those that have none (a script's list may name one released
// before), names each of those, and exits 3 at the end; an address named
// twice is released once, not then found missing. In -o json, "notFound"
// lists them.
func TestReleaseOfAListGoesOnPastAddressesWithoutARecord(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "k", "10.96.0.0/24")
	for _, a := range []string{"10.96.0.2", "10.96.0.3", "10.96.0.4", "10.96.0.5", "10.96.0.6"} {
		c.ok("ip", "allocate", a, "--parent", "services/default/a")
	}
	r := c.fail(exitNotFound, `ipamctl: not found: ipaddress "10.96.0.99", "10.96.0.98"`,
		"ip", "release", "10.96.0.2", "10.96.0.99", "10.96.0.3", "10.96.0.98", "10.96.0.2", "10.96.0.4")
	if want := "ipaddress/10.96.0.2 released\nipaddress/10.96.0.3 released\nipaddress/10.96.0.4 released\n"; r.stdout != want {
		t.Errorf("printed %q, want %q", r.stdout, want)
	}
	if strings.Contains(r.stderr, `"10.96.0.2"`) {
		t.Errorf("10.96.0.2, named twice, is said not found: %q", r.stderr)
	}
	var ips list[ipObject]
	c.json(&ips, "ip", "get")
	if len(ips.Items) != 2 {
		t.Errorf("left after the release: %+v, want 10.96.0.5 and 10.96.0.6", ips.Items)
	}

	r = c.fail(exitNotFound, `ipamctl: ipaddress "10.96.0.97" not found`, "ip", "release", "10.96.0.97", "10.96.0.5", "-o", "json")
	var rel struct{ Released, NotFound []string }
	if err := json.Unmarshal([]byte(r.stdout), &rel); err != nil || strings.Join(rel.Released, " ") != "10.96.0.5" || strings.Join(rel.NotFound, " ") != "10.96.0.97" {
		t.Errorf("-o json: %+v, %v\n%s", rel, err, r.stdout)
	}
	// All found: no "notFound" key.
	if out := c.ok("ip", "release", "10.96.0.6", "-o", "json"); strings.Contains(out, "notFound") {
		t.Errorf("-o json, all released:\n%s", out)
	}
}

// Repair's table prints a consumer's address text as it was written only
// when that is safe in a cell: text holding white space or a rune that is
// not printable (a tab would forge a column, an escape sequence control
// the terminal) is quoted.
func TestRepairQuotesAnAddressTextThatWouldForgeTheTable(t *testing.T) {
	c, _ := oneLeak(t)
	texts := []string{"10.96.0.5\tFORGED", "\x1b[2J10.96.0.6", "10.96.0.7 x", "10.96.0.8\u2028"}
	var entries []string
	for i, a := range texts {
		q, _ := json.Marshal(a)
		entries = append(entries, fmt.Sprintf(`{"parentRef": "services/default/s%d", "addresses": [%s]}`, i, q))
	}
	file := filepath.Join(t.TempDir(), "consumers.json")
	if err := os.WriteFile(file, []byte("["+strings.Join(entries, ",")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := c.ok("repair", "--consumers", file, "--dry-run")
	for _, a := range texts {
		if !regexp.MustCompile(`\nInvalid +` + regexp.QuoteMeta(strconv.Quote(a)) + ` +services/`).MatchString(out) {
			t.Errorf("repair's table lacks %s, quoted, in its ADDRESS column:\n%s", strconv.Quote(a), out)
		}
	}
	if strings.ContainsAny(out, "\t\x1b\u2028") {
		t.Errorf("repair's table holds a tab, an escape or a line separator:\n%q", out)
	}
	// Text that is safe stays as written.
	if !regexp.MustCompile(`\nLeakPending +10\.96\.0\.9 +services/`).MatchString(out) {
		t.Errorf("repair's table quotes a plain address:\n%s", out)
	}
}

// Repair's summary counts one of a thing in the singular.
func TestRepairSummaryCountsOneInTheSingular(t *testing.T) {
	c, file := oneLeak(t)
	out := c.ok("repair", "--consumers", file, "--leak-grace", "1h", "--dry-run")
	if want := "checked 1 record and 0 consumers: 1 finding (dry run"; !strings.Contains(out, want) {
		t.Errorf("repair says:\n%s\nwant %q", out, want)
	}
}

// oneLeak returns a store holding one record, 10.96.0.9 of
// services/default/gone, and a consumers file naming no consumer: to
// repair, a leak.
func oneLeak(t *testing.T) (*cli, string) {
	t.Helper()
	c := newBoltCLI(t)
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/24")
	c.ok("ip", "allocate", "10.96.0.9", "--parent", "services/default/gone")
	file := filepath.Join(t.TempDir(), "consumers.json")
	if err := os.WriteFile(file, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	return c, file
}

// fieldOf returns the value of the row named label in a view of one
// object (label, spaces, value), or "" if there is none.
func fieldOf(view, label string) string {
	for line := range strings.Lines(view) {
		if rest, ok := strings.CutPrefix(line, label); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// TestIPGetByCIDRListsTheAddressesInsideIt: --cidr lists the records
// inside a CIDR's prefixes by SPEC §2's containment (its network address,
// held under a wider CIDR, is not inside it), in both families, whatever
// other CIDR covers them too, and for a Terminating CIDR as well.
func TestIPGetByCIDRListsTheAddressesInsideIt(t *testing.T) {
	c := newBoltCLI(t)
	c.ok("cidr", "create", "small", "10.0.1.0/24", "fd00::/120")
	c.ok("cidr", "create", "big", "10.0.0.0/16")
	for addr, owner := range map[string]string{
		"10.0.1.0":   "services/default/network", // small's network address, in big
		"10.0.1.5":   "services/default/a",
		"10.0.1.254": "services/default/b",
		"10.0.2.5":   "services/default/c", // big only
		"fd00::5":    "services/default/d",
	} {
		c.ok("ip", "allocate", addr, "--parent", owner)
	}
	names := func(args ...string) []string {
		t.Helper()
		var l struct{ Items []ipObject }
		c.json(&l, append([]string{"ip", "get"}, args...)...)
		var out []string
		for _, o := range l.Items {
			out = append(out, o.Name)
		}
		return out
	}
	if got, want := names("--cidr", "small"), []string{"10.0.1.5", "10.0.1.254", "fd00::5"}; !slices.Equal(got, want) {
		t.Errorf("ip get --cidr small: %q, want %q", got, want)
	}
	if got, want := names("--cidr", "big"), []string{"10.0.1.0", "10.0.1.5", "10.0.1.254", "10.0.2.5"}; !slices.Equal(got, want) {
		t.Errorf("ip get --cidr big: %q, want %q", got, want)
	}
	if out := c.ok("ip", "get", "--cidr=small"); out != "NAME         PARENTREF\n10.0.1.5     services/default/a\n10.0.1.254   services/default/b\nfd00::5      services/default/d\n" {
		t.Errorf("ip get --cidr=small printed\n%s", out)
	}
	c.fail(exitPending, "", "cidr", "delete", "small") // fd00::5 holds it
	if got, want := names("--cidr", "small"), []string{"10.0.1.5", "10.0.1.254", "fd00::5"}; !slices.Equal(got, want) {
		t.Errorf("ip get --cidr small, Terminating: %q, want %q", got, want)
	}
	c.fail(exitNotFound, `cidr "nope" not found`, "ip", "get", "--cidr", "nope")
	c.fail(exitUsage, "give it without an address or --parent", "ip", "get", "--cidr", "small", "--parent", "services/default/a")
	c.fail(exitUsage, "give it without an address or --parent", "ip", "get", "10.0.1.5", "--cidr", "small")
	c.fail(exitUsage, "metadata.name", "ip", "get", "--cidr", "a/b")
}

// Walkthrough 8.3 (renumbering) as the README shows it: the old default
// CIDR, deleted, serves nothing and stays while consumers hold it;
// ip get --cidr lists them; each re-created lands in the new CIDR, the
// old one goes with the last, and the default CIDR, re-created with the
// new prefix, lets the interim one go at once.
func TestWalkthroughRenumbering(t *testing.T) {
	c := newBoltCLI(t)
	from, to := netip.MustParsePrefix("10.96.0.0/28"), netip.MustParsePrefix("192.168.7.0/24")
	c.ok("cidr", "create", "kubernetes", from.String())
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes")
	services := []string{"services/default/web", "services/default/db"}
	for _, s := range services {
		c.allocateNext(s)
	}
	c.ok("cidr", "create", "renumbered", to.String())
	c.fail(exitPending, "", "cidr", "delete", "kubernetes")
	c.fail(exitUsage, "CIDR kubernetes is terminating", "ip", "allocate", "10.96.0.5", "--parent", "services/default/late") // not served
	var held struct{ Items []ipObject }
	c.json(&held, "ip", "get", "--cidr", "kubernetes")
	if len(held.Items) != 3 {
		t.Fatalf("ip get --cidr kubernetes: %+v, want the 3 services", held.Items)
	}
	for _, s := range services {
		c.ok("ip", "release", "--parent", s)
		if a := c.allocateNext(s); !to.Contains(a) {
			t.Errorf("%s moved to %s, outside %s", s, a, to)
		}
	}
	c.ok("ip", "release", "--parent", "services/default/kubernetes")
	c.ok("ip", "allocate", "192.168.7.1", "--parent", "services/default/kubernetes")
	c.fail(exitNotFound, `cidr "kubernetes" not found`, "cidr", "get", "kubernetes")
	c.ok("cidr", "create", "kubernetes", to.String())
	if out := c.ok("cidr", "delete", "renumbered"); out != "cidr/renumbered deleted\n" {
		t.Errorf("cidr delete renumbered: %q, want it gone at once", out)
	}
	var all struct{ Items []ipObject }
	c.json(&all, "ip", "get")
	for _, o := range all.Items {
		if !to.Contains(netip.MustParseAddr(o.Name)) {
			t.Errorf("%s still holds %s", o.ParentRef.Name, o.Name)
		}
	}
	if len(all.Items) != 3 {
		t.Errorf("ip get: %+v, want the 3 services", all.Items)
	}
}

// A CIDR left Terminating with nothing in it (a cidr delete killed between
// its mark and its removal) goes with the next command that may write,
// which decides it before it exits; a command that only reads (cidr get,
// opening the file read-only) shows it as it is.
func TestAStrandedTerminatingCIDRGoesWithTheNextCommandThatWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ipam.db")
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []cidrset.CIDR{
		{Name: "kept", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.8.0.0/24")}},
		{Name: "stranded", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/24")}},
	} {
		c, err := st.CreateCIDR(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if c.Name == "stranded" {
			c.Terminating = true
			if _, err := st.UpdateCIDR(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	st.Close()
	c := &cli{t: t, store: []string{"--db", path}}
	if out := c.ok("cidr", "get"); !strings.Contains(out, "stranded") {
		t.Fatalf("cidr get, which only reads, no longer lists the stranded CIDR:\n%s", out)
	}
	// A command that writes nothing in the end still may: releasing an
	// address without a record, exit 3.
	c.fail(exitNotFound, "not found", "ip", "release", "10.8.0.9")
	wantCIDRList(t, c.ok("cidr", "get"), map[string][2]string{"kept": {"10.8.0.0/24", "Ready"}})
}

// The commands that take --dry-run name it where they are listed: in their
// usage line, the help, the package doc and the README.
func TestEveryDryRunIsNamedWhereItsCommandIs(t *testing.T) {
	doc, readme := docs(t)
	help := (&cli{t: t}).ok("help")
	var dry []string
	for _, cmd := range commands {
		if !slices.Contains(cmd.flags, "dry-run") {
			continue
		}
		dry = append(dry, cmd.name)
		if !strings.Contains(cmd.args, "[--dry-run]") {
			t.Errorf("the usage of %s, %q, does not name --dry-run", cmd.name, cmd.args)
		}
		for what, text := range map[string]string{"the help": help, "the package doc": doc} {
			named := false
			for l := range strings.Lines(text) {
				l = strings.TrimSpace(strings.TrimPrefix(l, "//"))
				named = named || strings.HasPrefix(l, cmd.name+" ") && strings.Contains(l, "[--dry-run]")
			}
			if !named {
				t.Errorf("%s lists %s without [--dry-run]", what, cmd.name)
			}
		}
		if !regexp.MustCompile("\\| `" + regexp.QuoteMeta(cmd.name) + " [^`|]*--dry-run").MatchString(readme) {
			t.Errorf("README.md's table of commands has no row for %s with --dry-run", cmd.name)
		}
	}
	if want := []string{"cidr create", "cidr update", "cidr delete", "ip allocate", "ip release", "repair"}; !slices.Equal(dry, want) {
		t.Errorf("the commands that take --dry-run are %v, want %v", dry, want)
	}
}

// docs returns the package doc's file (main.go) and README.md, where the
// commands are listed for their readers.
func docs(t *testing.T) (doc, readme string) {
	t.Helper()
	for _, f := range []struct {
		name string
		into *string
	}{{"main.go", &doc}, {"README.md", &readme}} {
		b, err := os.ReadFile(f.name)
		if err != nil {
			t.Fatal(err)
		}
		*f.into = string(b)
	}
	return doc, readme
}
