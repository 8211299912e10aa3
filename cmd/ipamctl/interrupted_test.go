package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// cancellingStore ends a command's context after its n-th deletion (one
// of an address without a record included), as --timeout or Ctrl-C would
// in the middle of a pass, and from then on refuses deletions as a store
// does whose context has ended.
type cancellingStore struct {
	store.Store
	cancel context.CancelFunc
	n      atomic.Int64
}

func (s *cancellingStore) DeleteAddressAt(ctx context.Context, addr netip.Addr, rev int64) (ipaddress.IPAddress, int64, error) {
	return s.deleted(ctx, func() (ipaddress.IPAddress, int64, error) { return s.Store.DeleteAddressAt(ctx, addr, rev) })
}

func (s *cancellingStore) DeleteAddress(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, int64, error) {
	return s.deleted(ctx, func() (ipaddress.IPAddress, int64, error) { return s.Store.DeleteAddress(ctx, addr) })
}

func (s *cancellingStore) deleted(ctx context.Context, del func() (ipaddress.IPAddress, int64, error)) (ipaddress.IPAddress, int64, error) {
	if err := ctx.Err(); err != nil {
		return ipaddress.IPAddress{}, 0, err
	}
	rec, deleted, err := del()
	if s.n.Add(-1) == 0 {
		s.cancel()
	}
	return rec, deleted, err
}

// cutShort runs the command of args in process over a store holding
// records of owner services/default/gone, whose context ends after its
// third deletion. It returns the output, how many records are left and
// the error.
func cutShort(t *testing.T, records int, args ...string) (string, int, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Records an hour old: past any leak grace.
	old := memory.WithClock(func() time.Time { return time.Now().Add(-time.Hour) })
	st := &cancellingStore{Store: memory.New(old), cancel: cancel}
	st.n.Store(3)
	a, err := allocator.New(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(context.Background(), "kubernetes", netip.MustParsePrefix("10.96.0.0/24")); err != nil {
		t.Fatal(err)
	}
	gone := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "gone"}
	for i := range records {
		if _, err := a.Allocate(context.Background(), netip.AddrFrom4([4]byte{10, 96, 0, byte(10 + i)}), gone); err != nil {
			t.Fatal(err)
		}
	}

	cl, err := parseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd, ok := lookup(cl.args)
	if !ok {
		t.Fatalf("no command %v", args)
	}
	cl.args = cl.args[len(strings.Fields(cmd.name)):]
	out, err := parseFormat(cl.flags["output"])
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	e := &env{ctx: ctx, cl: cl, out: out, stdout: &stdout, log: slog.New(slog.DiscardHandler), now: time.Now(), a: a, st: st}
	for _, step := range []func(*env) error{cmd.parse, cmd.prepare} {
		if step == nil {
			continue
		}
		if err := step(e); err != nil {
			t.Fatal(err)
		}
	}
	err = cmd.run(e)
	left, lerr := st.ListAddresses(context.Background())
	if lerr != nil {
		t.Fatal(lerr)
	}
	return stdout.String(), len(left), err
}

// A repair pass cut short keeps what it did until then; ipamctl reports
// that, marked incomplete, before it fails, and a whole pass is marked
// complete.
func TestARepairCutShortReportsWhatItDid(t *testing.T) {
	const records = 10
	consumers := filepath.Join(t.TempDir(), "consumers.json")
	if err := os.WriteFile(consumers, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	repairArgs := []string{"repair", "--consumers", consumers, "--leak-grace", "0s"}

	out, left, err := cutShort(t, records, append(repairArgs, "-o", "json")...)
	if !errors.Is(err, context.Canceled) || exitCode(err) != exitError {
		t.Fatalf("repair cut short: error %v (exit %d), want the context's (exit %d)", err, exitCode(err), exitError)
	}
	var rep repairReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("repair cut short -o json: %v\n%q", err, out)
	}
	if deleted := records - left; deleted != 3 || len(rep.Events) != deleted || rep.Complete {
		t.Errorf("repair cut short deleted %d records and reported %d, complete %v; want 3, 3, false\n%s", deleted, len(rep.Events), rep.Complete, out)
	}
	for _, ev := range rep.Events {
		if ev.Kind != "Leak" {
			t.Errorf("event %+v, want a Leak", ev)
		}
	}

	out, left, err = cutShort(t, records, repairArgs...)
	if !errors.Is(err, context.Canceled) || records-left != 3 || strings.Count(out, "\nLeak ") != 3 || !strings.Contains(out, "pass cut short: 3 findings until then") {
		t.Errorf("repair cut short, table: error %v, %d records deleted, output:\n%s", err, records-left, out)
	}

	// Two records: the pass ends before the context does.
	out, left, err = cutShort(t, 2, append(repairArgs, "-o", "json")...)
	rep = repairReport{}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || !rep.Complete || len(rep.Events) != 2 || left != 0 {
		t.Errorf("a whole pass: %v, %d left, %s", err, left, out)
	}
}

// The same for `ip release --parent`: the addresses released before the
// context ended are printed, as `ip release ADDR...` does before an error.
func TestAReleaseCutShortReportsWhatItReleased(t *testing.T) {
	const records = 10
	released := func(left int) []string {
		var out []string
		for i := range records - left {
			out = append(out, fmt.Sprintf("10.96.0.%d", 10+i))
		}
		return out
	}
	out, left, err := cutShort(t, records, "ip", "release", "--parent", "services/default/gone", "-o", "json")
	var rel struct{ Released []string }
	if !errors.Is(err, context.Canceled) || exitCode(err) != exitError {
		t.Fatalf("ip release --parent cut short: error %v (exit %d), want the context's (exit %d)", err, exitCode(err), exitError)
	}
	if err := json.Unmarshal([]byte(out), &rel); err != nil {
		t.Fatalf("ip release --parent cut short -o json: %v\n%q", err, out)
	}
	if want := released(left); len(want) != 3 || strings.Join(rel.Released, " ") != strings.Join(want, " ") {
		t.Errorf("ip release --parent cut short released %v and reported %v", want, rel.Released)
	}

	out, left, err = cutShort(t, records, "ip", "release", "--parent", "services/default/gone")
	want := ""
	for _, a := range released(left) {
		want += "ipaddress/" + a + " released\n"
	}
	if !errors.Is(err, context.Canceled) || left != records-3 || out != want {
		t.Errorf("ip release --parent cut short, table: error %v, %d left, output %q, want %q", err, left, out, want)
	}
}

// ip release ADDR... goes on past an address without a record, but any
// other error (here the context ending after the third deletion) stops
// it at once: what it released is printed, and the error says which
// addresses were not tried and which had no record.
func TestAReleaseOfAListStopsAtAnErrorNamingWhatWasNotTried(t *testing.T) {
	// 10.96.0.99 has no record; 10.96.0.13 is named twice.
	args := []string{"ip", "release", "10.96.0.10", "10.96.0.99", "10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14", "10.96.0.13"}
	const records = 10
	for _, format := range []string{"table", "json"} {
		out, left, err := cutShort(t, records, append(args, "-o", format)...)
		if !errors.Is(err, context.Canceled) || exitCode(err) != exitError || left != records-2 {
			t.Fatalf("-o %s: error %v (exit %d), %d records left; want the context's (exit %d), %d left", format, err, exitCode(err), left, exitError, records-2)
		}
		for _, want := range []string{"releasing 10.96.0.12: ", "not tried: 10.96.0.13, 10.96.0.14;", `ipaddress "10.96.0.99" not found`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("-o %s: error %q does not say %q", format, err, want)
			}
		}
		if format == "table" {
			if want := "ipaddress/10.96.0.10 released\nipaddress/10.96.0.11 released\n"; out != want {
				t.Errorf("printed %q, want %q", out, want)
			}
			continue
		}
		var rel struct{ Released, NotFound []string }
		if err := json.Unmarshal([]byte(out), &rel); err != nil {
			t.Fatalf("-o json: %v\n%q", err, out)
		}
		if strings.Join(rel.Released, " ") != "10.96.0.10 10.96.0.11" || strings.Join(rel.NotFound, " ") != "10.96.0.99" {
			t.Errorf("-o json: %+v, want released 10.96.0.10 and 10.96.0.11, 10.96.0.99 not found", rel)
		}
	}
}
