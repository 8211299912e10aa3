package bolt_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/bolt"
)

// crashEnv selects the crash child mode of the test binary; its value is
// the file to work on.
const crashEnv = "NETIPAM_BOLT_CRASH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(path)
		os.Exit(3) // crashChild never returns
	}
	os.Exit(m.Run())
}

// crashOwners are the owners the child allocates for. The last one takes
// a dual-stack pair per allocation (one store write for both).
var crashOwners = []string{"svc-0", "svc-1", "svc-2", "dual"}

func crashOwner(name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "crash", Name: name}
}

var crashPrefixes = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/112")}

// crashChild allocates and releases until it is killed, printing every
// acknowledged operation on stdout as soon as the call returns:
//
//	alloc OWNER ADDR [ADDR]   an allocation returned (two addresses: dual-stack)
//	releasing OWNER ADDR      a Release is about to be called
//	released OWNER ADDR       it returned
func crashChild(path string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	st, err := bolt.Open(path, bolt.WithLockTimeout(10*time.Second))
	if err != nil {
		fail(err)
	}
	strategy := allocator.Sequential()
	if rand.IntN(2) == 0 {
		strategy = allocator.RandomStart(nil)
	}
	a, err := allocator.New(ctx, st, allocator.WithStrategy(strategy))
	if err != nil {
		fail(err)
	}
	if _, err := a.EnsureDefault(ctx, crashPrefixes...); err != nil {
		fail(err)
	}
	var outMu sync.Mutex
	out := func(format string, args ...any) {
		line := fmt.Sprintf(format+"\n", args...)
		outMu.Lock()
		defer outMu.Unlock()
		if _, err := os.Stdout.WriteString(line); err != nil {
			fail(err)
		}
	}
	for _, name := range crashOwners {
		go func() {
			owner := crashOwner(name)
			recs, err := a.AddressesOf(ctx, owner)
			if err != nil {
				fail(err)
			}
			var held []netip.Addr
			for _, r := range recs {
				held = append(held, r.Addr)
			}
			for {
				if len(held) > 0 && rand.IntN(3) == 0 {
					i := rand.IntN(len(held))
					x := held[i]
					held = slices.Delete(held, i, i+1)
					out("releasing %s %s", name, x)
					if err := a.Release(ctx, x); err != nil {
						fail(err)
					}
					out("released %s %s", name, x)
					continue
				}
				if name == "dual" {
					v4, v6, err := a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
					if err != nil {
						fail(err)
					}
					out("alloc %s %s %s", name, v4.Addr, v6.Addr)
					held = append(held, v4.Addr, v6.Addr)
					continue
				}
				rec, err := a.AllocateNext(ctx, ipaddress.IPv4, owner)
				if err != nil {
					fail(err)
				}
				out("alloc %s %s", name, rec.Addr)
				held = append(held, rec.Addr)
			}
		}()
	}
	select {}
}

// TestCrash kills a process allocating on a file at random moments and
// checks after each kill that the file opens, that every acknowledged
// allocation not released is there with its owner, that nothing is held
// twice, that the owner index agrees with the records, and that the
// revision counter covers everything stored.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test re-executes the test binary 20 times")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	path := tempPath(t)
	held := map[netip.Addr]string{} // the file's content after the last round
	var lastRev int64
	start := time.Now()
	const rounds = 20
	total := 0
	for round := range rounds {
		lines, killedAfter := crashRound(t, path, rng)
		total += len(lines)
		held, lastRev = verifyCrash(t, round, path, held, lastRev, lines)
		t.Logf("round %d: killed after %v, %d lines acknowledged, %d addresses held, revision %d",
			round, killedAfter.Round(time.Millisecond), len(lines), len(held), lastRev)
	}
	t.Logf("%d rounds, %d acknowledged operations, %v", rounds, total, time.Since(start).Round(time.Millisecond))
}

// crashRound runs the child until it has acknowledged a few operations,
// kills it with SIGKILL after a random 20–300 ms, and returns every line
// it printed.
func crashRound(t *testing.T, path string, rng *rand.Rand) ([]string, time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lineCh := make(chan string, 1024)
	readDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lineCh <- sc.Text()
		}
		close(lineCh)
		readDone <- sc.Err()
	}()
	var lines []string
	minAcks := 3 + rng.IntN(5)
	timeout := time.After(30 * time.Second)
	for len(lines) < minAcks {
		select {
		case l, ok := <-lineCh:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("child exited after %d lines: %s", len(lines), stderr.String())
			}
			lines = append(lines, l)
		case <-timeout:
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("child printed %d lines in 30s: %s", len(lines), stderr.String())
		}
	}
	delay := 20*time.Millisecond + time.Duration(rng.Int64N(int64(280*time.Millisecond)))
	kill := time.After(delay)
	killed := false
	for !killed {
		select {
		case l, ok := <-lineCh:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("child exited before it was killed: %s", stderr.String())
			}
			lines = append(lines, l)
		case <-kill:
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	// Everything the child wrote before it died is still in the pipe.
	for l := range lineCh {
		lines = append(lines, l)
	}
	if err := <-readDone; err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not SIGKILL: %s", err, stderr.String())
	}
	return lines, delay
}

// verifyCrash replays the acknowledged lines over the content the file had
// before the round and compares with what the file holds now. It returns
// the file's content and revision.
func verifyCrash(t *testing.T, round int, path string, before map[netip.Addr]string, lastRev int64, lines []string) (map[netip.Addr]string, int64) {
	t.Helper()
	ctx := ctxT(t)
	st, err := bolt.Open(path, bolt.WithLockTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("round %d: Open after kill: %v", round, err)
	}
	defer st.Close()
	if err := st.Check(ctx); err != nil {
		t.Fatalf("round %d: Check: %v", round, err)
	}
	rev, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rev < lastRev+int64(len(lines))/2 {
		t.Fatalf("round %d: revision %d, was %d before %d acknowledged operations", round, rev, lastRev, len(lines))
	}

	// What the file holds, by address and through the owner index.
	all, err := st.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	actual := map[netip.Addr]string{}
	for _, r := range all {
		if _, dup := actual[r.Addr]; dup {
			t.Fatalf("round %d: %s listed twice", round, r.Addr)
		}
		if r.Parent.Namespace != "crash" || !slices.Contains(crashOwners, r.Parent.Name) {
			t.Fatalf("round %d: %s held by unknown owner %+v", round, r.Addr, r.Parent)
		}
		if r.Revision > rev || r.Revision <= 0 {
			t.Fatalf("round %d: %s at revision %d, store revision %d", round, r.Addr, r.Revision, rev)
		}
		actual[r.Addr] = r.Parent.Name
	}
	indexed := 0
	for _, name := range crashOwners {
		recs, err := st.AddressesOf(ctx, crashOwner(name))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if actual[r.Addr] != name {
				t.Fatalf("round %d: owner index has %s under %s, the record says %q", round, r.Addr, name, actual[r.Addr])
			}
		}
		indexed += len(recs)
	}
	if indexed != len(actual) {
		t.Fatalf("round %d: owner index holds %d addresses, the records %d", round, indexed, len(actual))
	}
	def, err := st.GetCIDR(ctx, "kubernetes")
	if err != nil || def.Revision > rev {
		t.Fatalf("round %d: default CIDR %+v, %v (store revision %d)", round, def, err, rev)
	}

	// Replay the acknowledgements.
	expected := maps.Clone(before)
	unsure := map[netip.Addr]bool{} // a release was in flight
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 {
			t.Fatalf("round %d: bad line %q", round, l)
		}
		owner := f[1]
		for _, s := range f[2:] {
			a := netip.MustParseAddr(s)
			switch f[0] {
			case "alloc":
				// An address whose release is in flight may be handed out
				// before its releaser prints "released": the release has
				// committed by then.
				if prev, ok := expected[a]; ok && !(unsure[a] && prev != owner) {
					t.Fatalf("round %d: %s allocated to %s while held by %s", round, a, owner, prev)
				}
				delete(unsure, a)
				expected[a] = owner
			case "releasing":
				if expected[a] != owner {
					t.Fatalf("round %d: %s released by %s, held by %q", round, a, owner, expected[a])
				}
				unsure[a] = true
			case "released":
				if expected[a] == owner { // not yet handed to another owner
					delete(expected, a)
					delete(unsure, a)
				}
			default:
				t.Fatalf("round %d: bad line %q", round, l)
			}
		}
	}
	for a, owner := range expected {
		got, ok := actual[a]
		switch {
		case !ok && unsure[a]:
		case got != owner && unsure[a]:
			// The release committed, and another owner's allocation in
			// flight took the address (both may share a commit): counted
			// below as that owner's unacknowledged one.
			delete(expected, a)
		case !ok:
			t.Fatalf("round %d: acknowledged %s of %s is lost", round, a, owner)
		case got != owner:
			t.Fatalf("round %d: %s held by %s, acknowledged to %s", round, a, got, owner)
		}
	}
	// Anything else is the one allocation per owner that was in flight.
	extra := map[string][]netip.Addr{}
	for a, owner := range actual {
		if _, ok := expected[a]; !ok {
			extra[owner] = append(extra[owner], a)
		}
	}
	for owner, as := range extra {
		ok := len(as) == 1 && owner != "dual" && as[0].Is4()
		if owner == "dual" {
			ok = len(as) == 2 && as[0].Is4() != as[1].Is4()
		}
		if !ok {
			t.Fatalf("round %d: %s holds unacknowledged %v", round, owner, as)
		}
	}
	return actual, rev
}
