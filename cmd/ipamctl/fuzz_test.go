package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netipam/netipam/ipaddress"
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
// run, never a panic, and never touches a store. A line it accepts it reads
// as it was written: checkReading holds of the invocation.
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
		// Accepted lines, for the reading to be checked: flags between
		// the words, inline values, aliases, "--", several arguments.
		"ip\x00release\x0010.0.0.2\x00-v\x00fd00::1\x00--db=a=b\x0010.0.0.1",
		"--timeout=5s\x00cidr\x00-o\x00yaml\x00get\x00--\x00kubernetes",
		"cidr\x00--lock-timeout\x000s\x00get\x00x\x00--",
		"--db\x00--\x00cidr\x00create\x00dual\x00fd00::/108\x0010.0.0.0/16",
		"ip\x00allocate\x00--family=6,4\x00--parent=gateways.gateway.networking.k8s.io/gw\x00-verbose=false",
		"ip\x00allocate\x00fd00::5\x00---parent\x00services/default/web\x00--family\x00IPv6",
		"repair\x00--dry-run\x00--consumers=--\x00--leak-grace\x000s\x00-o=json",
		"--etcd\x00https://a:1,https://b:2\x00--etcd-prefix\x00/p\x00--etcd-user=u:p:w\x00ip\x00get\x00--parent\x00svc/n",
		"repair\x00--consumers\x00-\x00-v=true",
		"cidr\x00get\x00-o\x00json",
		"ip\x00allocate\x00--parent\x00services/default/web\x00--family\x006",
		"ip\x00allocate\x00--dry-run\x00--family\x00dual\x00--ensure\x00--parent\x00services/default/web",
		"ip\x00allocate\x0010.0.0.1\x00--parent=services/default/web\x00--dry-run=false",
		"cidr\x00delete\x00kubernetes\x00--dry-run\x00-o\x00yaml",
		"--dry-run\x00cidr\x00get",
		"cidr\x00create\x00--dry-run\x00dual\x0010.0.0.0/16\x00fd00::/108",
		"cidr\x00update\x00x\x0010.0.0.0/24\x00fd00::/120\x00--dry-run=true\x00-o=json",
		"ip\x00release\x0010.0.0.1\x00fd00::1\x00--dry-run",
		"ip\x00release\x00--parent\x00services/default/web\x00--dry-run=false",
	} {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.Contains(line, "etcd-ca") || strings.Contains(line, "etcd-cert") || strings.Contains(line, "etcd-key") {
			return // those name files to read (/dev/zero would never end): not the parser's part
		}
		words := strings.Split(line, "\x00")
		inv, err := parseLine(words, nil, io.Discard, io.Discard)
		if err != nil {
			if code := exitCode(err); code != exitUsage {
				t.Fatalf("%q: %v: exit %d, want %d (usage)", line, err, code, exitUsage)
			}
			return
		}
		if inv == nil {
			return // the help, printed
		}
		if inv.e == nil || inv.timeout <= 0 {
			t.Fatalf("%q: an invocation without env or timeout: %+v", line, inv)
		}
		if err := checkReading(words, inv); err != nil {
			t.Fatalf("%q: read as %s %q, flags %q: %v", line, inv.cmd.name, inv.e.cl.args, inv.e.cl.flags, err)
		}
	})
}

// checkReading reports how inv, which parseLine made of words, misreads
// them, if it does:
//
//   - Every word is accounted for, left to right, by the result: it is the
//     next positional word (the command's words, then its arguments), or
//     a flag the result holds with the value the word gives (after the
//     first '=', or the next word for a flag that takes one, or "true"),
//     or the first "--" that is no flag's value, all words after which are
//     positional. Nothing positional and no flag is left unaccounted for.
//   - What parseLine made of the words prints back to them (printsBack):
//     addresses and prefixes are canonical, a REF is ParentRef.String's
//     form, --family names the families read, and the durations, -o and
//     the store flags are read as given.
//   - The canonical rendering of the result (flags as --name=value, then
//     "--" and the positional words) parses to the same invocation.
//   - A --dry-run read as true opens the store as the reads do, and
//     writes nothing (storeAccess.readOnly); without it, nothing is a
//     dry run, and only the commands that read open the store read-only.
func checkReading(words []string, inv *invocation) error {
	e := inv.e
	positional := append(strings.Fields(inv.cmd.name), e.cl.args...)
	if err := accountFor(words, positional, e.cl.flags); err != nil {
		return err
	}
	if err := printsBack(inv); err != nil {
		return err
	}
	var again []string
	for _, name := range slices.Sorted(maps.Keys(e.cl.flags)) {
		again = append(again, "--"+name+"="+e.cl.flags[name])
	}
	again = append(append(again, "--"), positional...)
	inv2, err := parseLine(again, nil, io.Discard, io.Discard)
	if err != nil || inv2 == nil {
		return fmt.Errorf("rendered as %q, it is refused: %v", again, err)
	}
	if diff := cmp.Diff(readingOf(inv), readingOf(inv2), readingCmp); diff != "" {
		return fmt.Errorf("rendered as %q, it reads otherwise (-first +second):\n%s", again, diff)
	}
	return nil
}

// accountFor is checkReading's first check: positional and flags, as
// parseLine read them from words, account for every word.
func accountFor(words, positional []string, flags map[string]string) error {
	seen := map[string]bool{}
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w == "--" {
			if rest := words[i+1:]; !slices.Equal(rest, positional) {
				return fmt.Errorf("the words after -- are %q, the positional words left %q", rest, positional)
			}
			positional = nil
			break
		}
		if len(w) < 2 || w[0] != '-' {
			if len(positional) == 0 || positional[0] != w {
				return fmt.Errorf("word %d %q is not the next positional word (those left: %q)", i, w, positional)
			}
			positional = positional[1:]
			continue
		}
		name, inline, hasInline := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if full, ok := flagAlias[name]; ok {
			name = full
		}
		got, ok := flags[name]
		if !ok || seen[name] {
			return fmt.Errorf("word %d %q: flag %q not read, or read twice", i, w, name)
		}
		seen[name] = true
		want := "true"
		switch {
		case hasInline:
			want = inline
		case flagSpec[name]:
			if i++; i == len(words) {
				return fmt.Errorf("flag %q read with %q, but the line ends", name, got)
			}
			want = words[i]
		}
		if got != want {
			return fmt.Errorf("flag %q read as %q, the line gives %q", name, got, want)
		}
	}
	if len(positional) > 0 {
		return fmt.Errorf("positional words %q are left when every word is accounted for", positional)
	}
	if len(seen) != len(flags) {
		return fmt.Errorf("%d flags read, %d on the line", len(flags), len(seen))
	}
	return nil
}

// printsBack checks what parseLine made of the arguments and flags against
// their text.
func printsBack(inv *invocation) error {
	e := inv.e
	args, in, flags := e.cl.args, e.in, e.cl.flags
	if in.addrs != nil {
		var got []string
		for _, a := range in.addrs {
			got = append(got, a.String())
		}
		if !slices.Equal(got, args) {
			return fmt.Errorf("addresses %q, arguments %q", got, args)
		}
	}
	if in.prefixes != nil {
		var got []string
		for _, p := range in.prefixes {
			got = append(got, p.String())
		}
		if !slices.Equal(got, args[1:]) {
			return fmt.Errorf("prefixes %q, arguments %q", got, args[1:])
		}
	}
	if ref, ok := flags["parent"]; in.byParent != ok || ok && in.parent.String() != ref {
		return fmt.Errorf("--parent %q (given: %v) read as %q (byParent %v)", ref, ok, in.parent, in.byParent)
	}
	if in.families != nil {
		fam := strings.ToLower(flags["family"])
		var want []ipaddress.Family
		if fam == "dual" || strings.Contains(fam, "4") {
			want = append(want, ipaddress.IPv4)
		}
		if fam == "dual" || strings.Contains(fam, "6") {
			want = append(want, ipaddress.IPv6)
		}
		if !slices.Equal(in.families, want) {
			return fmt.Errorf("--family %q read as %v", flags["family"], in.families)
		}
	}
	if s, ok := flags["leak-grace"]; ok {
		want, _ := time.ParseDuration(s)
		if want == 0 {
			want = -1 // no grace, as repair.Repairer takes it
		}
		if in.leakGrace != want {
			return fmt.Errorf("--leak-grace %q read as %v", s, in.leakGrace)
		}
	}
	want := 30 * time.Second
	if s, ok := flags["timeout"]; ok {
		want, _ = time.ParseDuration(s)
	}
	if inv.timeout != want {
		return fmt.Errorf("--timeout %q read as %v", flags["timeout"], inv.timeout)
	}
	outputs := map[string]format{"": formatTable, "table": formatTable, "wide": formatTable, "json": formatJSON, "yaml": formatYAML, "yml": formatYAML}
	if o, ok := outputs[flags["output"]]; !ok || e.out != o {
		return fmt.Errorf("-o %q read as %q", flags["output"], e.out)
	}
	if etcd := inv.spec.etcd; etcd != nil {
		for _, ep := range etcd.endpoints {
			if !strings.Contains(flags["etcd"], ep) {
				return fmt.Errorf("--etcd %q read with endpoint %q", flags["etcd"], ep)
			}
		}
		if etcd.prefix != flags["etcd-prefix"] {
			return fmt.Errorf("--etcd-prefix %q read as %q", flags["etcd-prefix"], etcd.prefix)
		}
		if u, ok := flags["etcd-user"]; ok && u != etcd.user+":"+etcd.password && u != etcd.user {
			return fmt.Errorf("--etcd-user %q read as user %q", u, etcd.user)
		}
	} else if db, ok := flags["db"]; inv.spec.path != db && (ok || inv.spec.path != "ipam.db") {
		return fmt.Errorf("--db %q (given: %v) read as %q", db, ok, inv.spec.path)
	}
	access := storeAccess{mustExist: inv.cmd.mustExist || inv.cmd.readOnly, readOnly: inv.cmd.readOnly}
	if flags["dry-run"] == "true" {
		access = storeAccess{mustExist: true, readOnly: true}
	}
	if e.access != access {
		return fmt.Errorf("--dry-run %q: %s opens the store as %+v, want %+v", flags["dry-run"], inv.cmd.name, e.access, access)
	}
	return nil
}

// reading is what an invocation holds that a rendering of its line must
// keep.
type reading struct {
	Command string
	Args    []string
	Flags   map[string]string
	In      input
	Out     format
	Access  storeAccess
	Spec    storeSpec
	Timeout time.Duration
}

func readingOf(inv *invocation) reading {
	e := inv.e
	return reading{Command: inv.cmd.name, Args: e.cl.args, Flags: e.cl.flags, In: e.in, Out: e.out, Access: e.access, Spec: inv.spec, Timeout: inv.timeout}
}

var readingCmp = cmp.Options{
	cmp.AllowUnexported(input{}, storeSpec{}, etcdSpec{}, storeAccess{}),
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}
