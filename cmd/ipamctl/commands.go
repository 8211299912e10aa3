package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/finalizer"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
)

type command struct {
	name    string
	flags   []string
	minArgs int
	maxArgs int // -1: any
	args    string
	run     func(*env) error
	// parse, if set, parses and checks the arguments and flags into e.in
	// before anything is read or opened.
	parse func(*env) error
	// prepare, if set, reads the command's input before the store is
	// opened (and a bbolt file locked): input that is slow to come, or
	// wrong, holds no lock.
	prepare func(*env) error
	// mustExist commands refuse a missing --db file instead of creating
	// an empty store there: on a mistyped path, a read would show an
	// empty store as if it were the real one, and ip release, cidr delete
	// or cidr update would answer "not found", which a script takes for
	// "already done".
	mustExist bool
	// readOnly commands write nothing: they open the file read-only (a
	// shared lock, beside other readers, and a file one may only read),
	// and etcd through a store that refuses every write (noWrites). They
	// are mustExist too: a file opened read-only is never created.
	// A command that writes but has a --dry-run decides per invocation,
	// in its parse (dryRunAccess).
	readOnly bool
}

// dryRunMark ends what a dry run prints in a table: the outcome it
// reports was not brought about.
const dryRunMark = " (dry run: nothing changed)"

// dryRunAccess makes a --dry-run open the store as the reads do, and
// write nothing: a bbolt file read-only (a shared lock, a file one may
// only read; a missing one is refused, not created), etcd through a store
// that refuses every write.
func dryRunAccess(e *env) {
	if e.cl.has("dry-run") {
		e.access = storeAccess{mustExist: true, readOnly: true}
	}
}

var commands = []command{
	// More than two prefixes are cidrset.Validate's to refuse, with SPEC
	// §1's message ("may only hold up to 2 values"), not the usage's.
	{name: "cidr create", flags: []string{"dry-run"}, minArgs: 2, maxArgs: -1, args: "NAME PREFIX [PREFIX] [--dry-run]", run: cidrCreate, parse: cidrCreateArgs},
	{name: "cidr update", flags: []string{"dry-run"}, minArgs: 3, maxArgs: -1, args: "NAME PREFIX PREFIX [--dry-run]", run: cidrUpdate, parse: cidrUpdateArgs, mustExist: true},
	{name: "cidr get", maxArgs: 1, args: "[NAME]", run: cidrGet, parse: cidrNameArg, readOnly: true},
	{name: "cidr delete", flags: []string{"dry-run"}, minArgs: 1, maxArgs: 1, args: "NAME [--dry-run]", run: cidrDelete, parse: cidrDeleteArgs, mustExist: true},
	{name: "ip allocate", flags: []string{"family", "parent", "ensure", "dry-run"}, maxArgs: 1, args: "[ADDR] --parent REF [--family 4|6|dual] [--ensure] [--dry-run]", run: ipAllocate, parse: ipAllocateArgs},
	{name: "ip get", flags: []string{"parent", "cidr"}, maxArgs: 1, args: "[ADDR | --parent REF | --cidr NAME]", run: ipGet, parse: ipGetArgs, readOnly: true},
	{name: "ip release", flags: []string{"parent", "dry-run"}, maxArgs: -1, args: "ADDR... | --parent REF [--dry-run]", run: ipRelease, parse: ipReleaseArgs, mustExist: true},
	{name: "repair", flags: []string{"consumers", "dry-run", "leak-grace"}, args: "--consumers FILE [--dry-run] [--leak-grace D]", run: repairCmd, parse: repairArgs, prepare: repairInput},
	{name: "usage", args: "", run: usageCmd, readOnly: true},
}

func lookup(args []string) (command, bool) {
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return c, true
		}
	}
	return command{}, false
}

// subcommands returns the commands of the group named group ("cidr":
// create, update, get, delete), none if it names no group.
func subcommands(group string) []string {
	var subs []string
	for _, c := range commands {
		if words := strings.Fields(c.name); len(words) > 1 && words[0] == group {
			subs = append(subs, words[1])
		}
	}
	return subs
}

func (c command) checkArgs(args []string) error {
	if len(args) < c.minArgs || (c.maxArgs >= 0 && len(args) > c.maxArgs) {
		return usageErrorf("usage: ipamctl %s %s", c.name, c.args)
	}
	if slices.Contains(args, "") {
		return usageErrorf("usage: ipamctl %s %s: an argument is empty", c.name, c.args)
	}
	return nil
}

// ---- objects as printed by -o json|yaml ----

type condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

type cidrObject struct {
	Name        string      `json:"name"`
	CIDRs       []string    `json:"cidrs"`
	Terminating bool        `json:"terminating"`
	Created     time.Time   `json:"created"`
	Conditions  []condition `json:"conditions"`
	Blocking    []string    `json:"blocking,omitempty"`
	// MoreBlocking: more addresses hold the CIDR than Blocking lists.
	MoreBlocking bool `json:"moreBlocking,omitempty"`
}

// cidrStatus is a CIDR's STATUS column in the tables of cidr get and
// usage: Terminating once its deletion was requested, else Ready.
func cidrStatus(terminating bool) string {
	if terminating {
		return "Terminating"
	}
	return "Ready"
}

// blockingList prints addresses holding a CIDR, saying when there are more.
func blockingList(addrs []string, more bool) string {
	s := strings.Join(addrs, ", ")
	if more {
		s += ", and more"
	}
	return s
}

func toCIDRObject(c cidrset.CIDR) cidrObject {
	o := cidrObject{Name: c.Name, Terminating: c.Terminating, Created: c.Created.UTC(), CIDRs: []string{}}
	for _, p := range c.Prefixes {
		o.CIDRs = append(o.CIDRs, p.String())
	}
	r := c.Ready()
	status := "False"
	if r.Status {
		status = "True"
	}
	o.Conditions = []condition{{Type: r.Type, Status: status, Reason: r.Reason, Message: r.Message}}
	return o
}

type parentRefObject struct {
	Group     string `json:"group"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type ipObject struct {
	Name      string            `json:"name"`
	Family    string            `json:"family"`
	ParentRef parentRefObject   `json:"parentRef"`
	Labels    map[string]string `json:"labels"`
	Created   time.Time         `json:"created"`
}

func toIPObject(r ipaddress.IPAddress) ipObject {
	return ipObject{
		Name:   r.Name(),
		Family: r.Family().String(),
		ParentRef: parentRefObject{
			Group: r.Parent.Group, Resource: r.Parent.Resource, Namespace: r.Parent.Namespace, Name: r.Parent.Name,
		},
		Labels:  r.Labels(),
		Created: r.Created.UTC(),
	}
}

type list[T any] struct {
	Items []T `json:"items"`
}

// ---- cidr ----

func parsePrefixes(args []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range args {
		p, err := cidrset.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// cidrCreateArgs checks the CIDR as CreateCIDR does first, and makes a
// --dry-run write nothing.
func cidrCreateArgs(e *env) error {
	dryRunAccess(e)
	prefixes, err := parsePrefixes(e.cl.args[1:])
	if err != nil {
		return err
	}
	e.in.prefixes = prefixes
	return cidrset.CIDR{Name: e.cl.args[0], Prefixes: prefixes}.Validate()
}

// cidrUpdateArgs checks the CIDR as it would be after the update; whether
// the stored one may become it is the store's to say. A --dry-run writes
// nothing.
func cidrUpdateArgs(e *env) error {
	dryRunAccess(e)
	prefixes, err := parsePrefixes(e.cl.args[1:])
	if err != nil {
		return err
	}
	e.in.prefixes = prefixes
	return cidrset.CIDR{Name: e.cl.args[0], Prefixes: prefixes}.Validate()
}

// cidrNameArg checks the NAME of cidr delete and cidr get, if given: one
// no stored CIDR can have is a mistake (exit 2) found before the store is
// opened, not a lookup. The check is the store's (store.CheckCIDRName),
// not cidr create's: a CIDR a store holds under a name cidrset refuses
// (written by an embedder, or edited by hand in etcd) is listed by cidr
// get, and must be shown and deleted by name too.
func cidrNameArg(e *env) error {
	if len(e.cl.args) == 0 {
		return nil
	}
	return store.CheckCIDRName(e.cl.args[0])
}

// cidrDeleteArgs checks cidr delete's NAME, as cidr get's, and makes a
// --dry-run write nothing.
func cidrDeleteArgs(e *env) error {
	dryRunAccess(e)
	return cidrNameArg(e)
}

// cidrCreate creates a CIDR or, with --dry-run, says whether it would
// (allocator.DryRun.CreateCIDR): the CIDR it would create, or its error.
func cidrCreate(e *env) error {
	var c cidrset.CIDR
	var err error
	if e.cl.has("dry-run") {
		c = cidrset.CIDR{Name: e.cl.args[0], Prefixes: e.in.prefixes}
		err = e.a.DryRun().CreateCIDR(e.ctx, c.Name, c.Prefixes...)
	} else {
		c, err = e.a.CreateCIDR(e.ctx, e.cl.args[0], e.in.prefixes...)
	}
	if err != nil {
		return err
	}
	return printCIDRWritten(e, c, "created")
}

// cidrUpdate updates a CIDR or, with --dry-run, says whether it would
// (allocator.DryRun.UpdateCIDR): the CIDR as it would be, or its error.
func cidrUpdate(e *env) error {
	update := e.a.UpdateCIDR
	if e.cl.has("dry-run") {
		update = e.a.DryRun().UpdateCIDR
	}
	c, err := update(e.ctx, e.cl.args[0], e.in.prefixes...)
	if err != nil {
		return notFound("cidr", e.cl.args[0], err)
	}
	return printCIDRWritten(e, c, "updated")
}

// cidrPreview is a CIDR as cidr create or update --dry-run prints it in
// -o json or yaml: as the real command would, less the creation time of a
// CIDR not created, and marked a dry run.
type cidrPreview struct {
	cidrObject
	Created time.Time `json:"created,omitzero"` // in place of cidrObject's
	DryRun  bool      `json:"dryRun"`
}

// printCIDRWritten prints the CIDR cidr create or update wrote (done:
// "created", "updated") or, with --dry-run, would write, marked as such.
func printCIDRWritten(e *env, c cidrset.CIDR, done string) error {
	dry := e.cl.has("dry-run")
	switch {
	case e.out == formatTable && dry:
		fmt.Fprintf(e.stdout, "cidr/%s %s%s\n", c.Name, done, dryRunMark)
		return nil
	case e.out == formatTable:
		fmt.Fprintf(e.stdout, "cidr/%s %s\n", c.Name, done)
		return nil
	case dry:
		o := toCIDRObject(c)
		return emit(e.stdout, e.out, cidrPreview{cidrObject: o, Created: o.Created, DryRun: true})
	}
	return emit(e.stdout, e.out, toCIDRObject(c))
}

func cidrGet(e *env) error {
	if len(e.cl.args) == 0 {
		cidrs := e.a.CIDRs()
		if e.out != formatTable {
			l := list[cidrObject]{Items: []cidrObject{}}
			for _, c := range cidrs {
				l.Items = append(l.Items, toCIDRObject(c))
			}
			return emit(e.stdout, e.out, l)
		}
		t := newTable(e.stdout, "NAME", "CIDRS", "STATUS", "AGE")
		for _, c := range cidrs {
			t.row(c.Name, strings.Join(toCIDRObject(c).CIDRs, ","), cidrStatus(c.Terminating), age(c.Created, e.now))
		}
		return t.flush()
	}
	c, err := e.st.GetCIDR(e.ctx, e.cl.args[0])
	if err != nil {
		return notFound("cidr", e.cl.args[0], err)
	}
	o := toCIDRObject(c)
	if c.Terminating {
		if d, err := e.a.DryRun().DeleteCIDR(e.ctx, c.Name); err == nil {
			for _, b := range d.Blocking {
				o.Blocking = append(o.Blocking, b.String())
			}
			o.MoreBlocking = d.More
		}
	}
	if e.out != formatTable {
		return emit(e.stdout, e.out, o)
	}
	cond := o.Conditions[0]
	t := newTable(e.stdout, "Name:", o.Name)
	t.row("CIDRs:", strings.Join(o.CIDRs, ","))
	t.row("Created:", fmt.Sprintf("%s (%s ago)", o.Created.Format(time.RFC3339), age(c.Created, e.now)))
	t.row("Status:", cidrStatus(c.Terminating)) // the STATUS column of the list
	t.row("Ready:", cond.Status)
	if cond.Reason != "" {
		t.row("Reason:", cond.Reason)
	}
	t.row("Message:", cond.Message)
	if len(o.Blocking) > 0 {
		t.row("Blocking:", blockingList(o.Blocking, o.MoreBlocking))
	}
	return t.flush()
}

// notFound names what was not found; the error still matches
// store.ErrNotFound.
func notFound(kind, name string, err error) error {
	if errors.Is(err, allocator.ErrNotFound) {
		return &notFoundError{kind: kind, names: []string{name}}
	}
	return err
}

// notFoundError names the objects of a kind that were not found, one or
// more (ip release ADDR...).
type notFoundError struct {
	kind  string
	names []string
}

func (e *notFoundError) Error() string {
	q := make([]string, len(e.names))
	for i, n := range e.names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return fmt.Sprintf("%s %s not found", e.kind, q[0])
	}
	return fmt.Sprintf("not found: %s %s", e.kind, strings.Join(q, ", "))
}

func (e *notFoundError) Is(target error) bool { return target == allocator.ErrNotFound }

type deleteResult struct {
	Name        string   `json:"name"`
	Deleted     bool     `json:"deleted"`
	Terminating bool     `json:"terminating"`
	Reason      string   `json:"reason,omitempty"`
	Message     string   `json:"message,omitempty"`
	Blocking    []string `json:"blocking,omitempty"`
	// MoreBlocking: more addresses hold the CIDR than Blocking lists.
	MoreBlocking bool `json:"moreBlocking,omitempty"`
	// DryRun: --dry-run, so this is what the deletion would do.
	DryRun bool `json:"dryRun,omitempty"`
}

// cidrDelete deletes a CIDR or, with --dry-run, says what the deletion
// would do (allocator.DryRun.DeleteCIDR), as the deletion says it, with
// its exit code: deleted at once (0), or left Terminating, held by the
// addresses listed (6).
func cidrDelete(e *env) error {
	name := e.cl.args[0]
	dry, mark := e.cl.has("dry-run"), ""
	var err error
	if dry {
		mark = dryRunMark
		var d finalizer.Decision
		if d, err = e.a.DryRun().DeleteCIDR(e.ctx, name); err == nil && !d.Remove {
			err = &allocator.DeletionBlockedError{CIDR: name, Blocking: d.Blocking, More: d.More}
		}
	} else {
		err = e.a.DeleteCIDR(e.ctx, name)
	}
	var blocked *allocator.DeletionBlockedError
	switch {
	case err == nil:
		if e.out != formatTable {
			return emit(e.stdout, e.out, deleteResult{Name: name, Deleted: true, DryRun: dry})
		}
		fmt.Fprintf(e.stdout, "cidr/%s deleted%s\n", name, mark)
		return nil
	case errors.As(err, &blocked):
		r := deleteResult{Name: name, Terminating: true, Reason: cidrset.ReasonTerminating, Message: cidrset.MessageBlockedDelete, MoreBlocking: blocked.More, DryRun: dry}
		for _, a := range blocked.Blocking {
			r.Blocking = append(r.Blocking, a.String())
		}
		if e.out != formatTable {
			if err := emit(e.stdout, e.out, r); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(e.stdout, "cidr/%s terminating: Ready=False reason=%s: %s%s\n", name, r.Reason, r.Message, mark)
			fmt.Fprintf(e.stdout, "blocking addresses: %s\n", blockingList(r.Blocking, r.MoreBlocking))
		}
		return &pendingError{err}
	}
	return notFound("cidr", name, err)
}

// ---- ip ----

// parentFlag parses --parent into e.in.
func parentFlag(e *env, required bool) error {
	s, ok := e.cl.flags["parent"]
	if !ok {
		if required {
			return usageErrorf("--parent REF is required (e.g. --parent services/default/kubernetes)")
		}
		return nil
	}
	ref, err := ipaddress.ParseParentRef(s)
	if err != nil {
		return err
	}
	e.in.parent, e.in.byParent = ref, true
	return nil
}

// addrArgs parses the addresses given as arguments into e.in.
func addrArgs(e *env) error {
	for _, s := range e.cl.args {
		a, err := parseAddr(s)
		if err != nil {
			return err
		}
		e.in.addrs = append(e.in.addrs, a)
	}
	return nil
}

func parseAddr(s string) (netip.Addr, error) { return ipaddress.ParseAddr(s) }

// familyFlag reads --family, in any case: 4 or ipv4, 6 or ipv6, and dual,
// 4,6 or 6,4 for both. It returns no family for anything else.
func familyFlag(s string) []ipaddress.Family {
	switch strings.ToLower(s) {
	case "4", "ipv4":
		return []ipaddress.Family{ipaddress.IPv4}
	case "6", "ipv6":
		return []ipaddress.Family{ipaddress.IPv6}
	case "dual", "4,6", "6,4":
		return []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6}
	}
	return nil
}

func ipAllocateArgs(e *env) error {
	if err := parentFlag(e, true); err != nil {
		return err
	}
	if err := addrArgs(e); err != nil {
		return err
	}
	fam, famGiven := e.cl.flags["family"]
	fs := familyFlag(fam)
	switch {
	case famGiven && len(fs) == 0:
		// Said alike with an address or without: the value is wrong, not
		// its match with the address.
		return usageErrorf("--family %q: must be 4, 6 or dual", fam)
	case len(e.in.addrs) == 1:
		if addr := e.in.addrs[0]; famGiven && (len(fs) != 1 || fs[0] != ipaddress.FamilyOf(addr)) {
			return usageErrorf("--family %s does not match address %s", fam, addr)
		}
	case !famGiven:
		return usageErrorf("ip allocate: give an address or --family 4|6|dual")
	default:
		e.in.families = fs
	}
	e.in.ensure = e.cl.has("ensure")
	dryRunAccess(e)
	return nil
}

// ipAllocate allocates, or with --dry-run says what it would allocate,
// and prints the records.
func ipAllocate(e *env) error {
	allocate := allocateRecords
	if e.cl.has("dry-run") {
		allocate = wouldAllocate
	}
	recs, err := allocate(e)
	if err != nil {
		return err
	}
	return printAllocated(e, recs)
}

// allocateRecords allocates what ip allocate asks for, and returns the
// records.
func allocateRecords(e *env) ([]ipaddress.IPAddress, error) {
	ref := e.in.parent
	var recs []ipaddress.IPAddress
	switch fs := e.in.families; {
	case len(e.in.addrs) == 1:
		addr := e.in.addrs[0]
		allocate := e.a.Allocate
		if e.in.ensure {
			allocate = e.a.EnsureAllocated
		}
		rec, err := allocate(e.ctx, addr, ref)
		if err != nil {
			return nil, fmt.Errorf("allocating %s: %w", addr, err)
		}
		recs = append(recs, rec)
	case e.in.ensure && len(fs) == 1:
		rec, err := e.a.EnsureNext(e.ctx, fs[0], ref)
		if err != nil {
			return nil, fmt.Errorf("ensuring an %s address: %w", fs[0], err)
		}
		recs = append(recs, rec)
	case e.in.ensure:
		// REF holding neither gets a pair or nothing; holding one, it
		// keeps it whatever becomes of the other, and the error names it.
		v4, v6, err := e.a.EnsureDualStack(e.ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("ensuring a dual-stack pair: %w", err)
		}
		recs = append(recs, v4, v6)
	case len(fs) == 1:
		rec, err := e.a.AllocateNext(e.ctx, fs[0], ref)
		if err != nil {
			return nil, fmt.Errorf("allocating an %s address: %w", fs[0], err)
		}
		recs = append(recs, rec)
	default:
		v4, v6, err := e.a.AllocateDualStack(e.ctx, ref, netip.Addr{}, netip.Addr{})
		if err != nil {
			return nil, fmt.Errorf("allocating a dual-stack pair: %w", err)
		}
		recs = append(recs, v4, v6)
	}
	return recs, nil
}

// wouldAllocate is allocateRecords' dry run: the records ip allocate would
// return now, or its error, said alike, from allocator.DryRun, writing
// nothing. A record REF holds already (--ensure) is returned as it is; one
// that would be made has no creation time, nor revision. With --family
// the address is one the allocator would choose now: its random start
// may choose another free one for the real command.
func wouldAllocate(e *env) ([]ipaddress.IPAddress, error) {
	ref, d := e.in.parent, e.a.DryRun()
	var addrs []netip.Addr
	switch fs := e.in.families; {
	case len(e.in.addrs) == 1:
		addr := e.in.addrs[0]
		if e.in.ensure {
			// EnsureAllocated's first answer: REF holds it already.
			rec, err := e.a.Get(e.ctx, addr)
			if err == nil && rec.Parent == ref {
				return []ipaddress.IPAddress{rec}, nil
			}
			if err != nil && !errors.Is(err, allocator.ErrNotFound) {
				return nil, fmt.Errorf("allocating %s: %w", addr, err)
			}
		}
		if err := d.Allocate(e.ctx, addr, ref); err != nil {
			return nil, fmt.Errorf("allocating %s: %w", addr, err)
		}
		return []ipaddress.IPAddress{{Addr: addr, Parent: ref}}, nil
	case e.in.ensure && len(fs) == 1:
		addr, err := d.EnsureNext(e.ctx, fs[0], ref)
		if err != nil {
			return nil, fmt.Errorf("ensuring an %s address: %w", fs[0], err)
		}
		addrs = append(addrs, addr)
	case e.in.ensure:
		v4, v6, err := d.EnsureDualStack(e.ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("ensuring a dual-stack pair: %w", err)
		}
		addrs = append(addrs, v4, v6)
	case len(fs) == 1:
		addr, err := d.AllocateNext(e.ctx, fs[0], ref)
		if err != nil {
			return nil, fmt.Errorf("allocating an %s address: %w", fs[0], err)
		}
		return []ipaddress.IPAddress{{Addr: addr, Parent: ref}}, nil
	default:
		v4, v6, err := d.AllocateDualStack(e.ctx, ref, netip.Addr{}, netip.Addr{})
		if err != nil {
			return nil, fmt.Errorf("allocating a dual-stack pair: %w", err)
		}
		return []ipaddress.IPAddress{{Addr: v4, Parent: ref}, {Addr: v6, Parent: ref}}, nil
	}
	// --ensure with --family: of each address, the record REF holds, if
	// it does, else the record that would be made.
	recs := make([]ipaddress.IPAddress, 0, len(addrs))
	for _, addr := range addrs {
		rec, err := e.a.Get(e.ctx, addr)
		switch {
		case err == nil && rec.Parent == ref:
			recs = append(recs, rec)
		case err == nil || errors.Is(err, allocator.ErrNotFound):
			recs = append(recs, ipaddress.IPAddress{Addr: addr, Parent: ref})
		default:
			return nil, fmt.Errorf("reading the record of %s: %w", addr, err)
		}
	}
	return recs, nil
}

// ipPreview is a record as ip allocate --dry-run prints it in -o json or
// yaml: as the real command would, less the creation time of a record not
// made, and marked a dry run.
type ipPreview struct {
	ipObject
	Created time.Time `json:"created,omitzero"` // in place of ipObject's
	DryRun  bool      `json:"dryRun"`
}

// printAllocated prints the records ip allocate gave, or with --dry-run
// would give, marked as such.
func printAllocated(e *env, recs []ipaddress.IPAddress) error {
	dry := e.cl.has("dry-run")
	switch {
	case e.out == formatTable:
		mark := ""
		if dry {
			mark = dryRunMark
		}
		for _, r := range recs {
			fmt.Fprintf(e.stdout, "ipaddress/%s allocated to %s%s\n", r.Name(), r.Parent, mark)
		}
		return nil
	case dry:
		var previews []ipPreview
		for _, r := range recs {
			o := toIPObject(r)
			previews = append(previews, ipPreview{ipObject: o, Created: o.Created, DryRun: true})
		}
		if len(previews) == 1 {
			return emit(e.stdout, e.out, previews[0])
		}
		return emit(e.stdout, e.out, struct {
			DryRun bool        `json:"dryRun"`
			Items  []ipPreview `json:"items"`
		}{DryRun: true, Items: previews})
	case len(recs) == 1:
		return emit(e.stdout, e.out, toIPObject(recs[0]))
	}
	l := list[ipObject]{}
	for _, r := range recs {
		l.Items = append(l.Items, toIPObject(r))
	}
	return emit(e.stdout, e.out, l)
}

func ipGetArgs(e *env) error {
	if err := parentFlag(e, false); err != nil {
		return err
	}
	name, byCIDR := e.cl.flags["cidr"]
	switch {
	case len(e.cl.args) == 1 && e.in.byParent:
		return usageErrorf("ip get: give an address or --parent, not both")
	case byCIDR && (len(e.cl.args) == 1 || e.in.byParent):
		return usageErrorf("ip get: --cidr lists a CIDR's records; give it without an address or --parent")
	case byCIDR:
		// Any name a store holds, as cidr get NAME takes.
		if err := store.CheckCIDRName(name); err != nil {
			return err
		}
		e.in.cidr = name
	}
	return addrArgs(e)
}

func ipGet(e *env) error {
	var recs []ipaddress.IPAddress
	var err error
	single := len(e.in.addrs) == 1
	switch {
	case single:
		addr := e.in.addrs[0]
		rec, err := e.a.Get(e.ctx, addr)
		if err != nil {
			return notFound("ipaddress", addr.String(), err)
		}
		recs = append(recs, rec)
	case e.in.byParent:
		recs, err = e.a.AddressesOf(e.ctx, e.in.parent)
	case e.in.cidr != "":
		c, cerr := e.st.GetCIDR(e.ctx, e.in.cidr)
		if cerr != nil {
			return notFound("cidr", e.in.cidr, cerr)
		}
		recs, err = e.st.ListAddresses(e.ctx)
		// Its addresses as SPEC §2 has it: a prefix's network address
		// (and IPv4 broadcast) is not inside it.
		recs = slices.DeleteFunc(recs, func(r ipaddress.IPAddress) bool {
			return !slices.ContainsFunc(c.Prefixes, func(p netip.Prefix) bool { return cidrset.HostContains(p, r.Addr) })
		})
	default:
		recs, err = e.st.ListAddresses(e.ctx)
	}
	// Records the store cannot decode hide none of the others: list
	// those, warn of each left out, and fail (exit 1, corrupt data) so
	// that a script does not take the list for the whole.
	var skipped *store.SkippedError
	if errors.As(err, &skipped) {
		warnSkipped(e, skipped, "left out of the list")
	} else if err != nil {
		return err
	}
	if err := printRecords(e, recs, single); err != nil {
		return err
	}
	if skipped != nil {
		return fmt.Errorf("the list lacks %s that cannot be read (see the warnings): %w", counted(skipped.Count, "record"), store.ErrCorrupt)
	}
	return nil
}

// warnSkipped warns of each record a read left out as it cannot be
// decoded, saying what came of it.
func warnSkipped(e *env, skipped *store.SkippedError, what string) {
	for _, r := range skipped.Records {
		e.warn(fmt.Errorf("%s: %w", what, r.Err))
	}
	if more := skipped.Count - len(skipped.Records); more > 0 {
		e.warn(fmt.Errorf("%s: %s more that cannot be read", what, counted(more, "record")))
	}
}

// printRecords prints address records, one as an object when single.
func printRecords(e *env, recs []ipaddress.IPAddress, single bool) error {
	slices.SortFunc(recs, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	if e.out != formatTable {
		if single {
			return emit(e.stdout, e.out, toIPObject(recs[0]))
		}
		l := list[ipObject]{Items: []ipObject{}}
		for _, r := range recs {
			l.Items = append(l.Items, toIPObject(r))
		}
		return emit(e.stdout, e.out, l)
	}
	t := newTable(e.stdout, "NAME", "PARENTREF")
	for _, r := range recs {
		t.row(r.Name(), r.Parent.String())
	}
	return t.flush()
}

func ipReleaseArgs(e *env) error {
	if err := parentFlag(e, false); err != nil {
		return err
	}
	switch {
	case e.in.byParent && len(e.cl.args) > 0:
		return usageErrorf("ip release: give addresses or --parent, not both")
	case !e.in.byParent && len(e.cl.args) == 0:
		return usageErrorf("usage: ipamctl ip release ADDR... | --parent REF [--dry-run]")
	}
	dryRunAccess(e)
	return addrArgs(e)
}

// ipRelease releases addresses, or an owner's, or with --dry-run says
// what it would release, as it says it, with its exit code: the records
// it would release are those the store holds now (Get, AddressesOf), read
// and not deleted.
func ipRelease(e *env) error {
	release, releaseOwner := e.a.Release, e.a.ReleaseOwner
	if e.cl.has("dry-run") {
		release = func(ctx context.Context, a netip.Addr) error {
			_, err := e.a.Get(ctx, a)
			return err
		}
		releaseOwner = func(ctx context.Context, owner ipaddress.ParentRef) ([]netip.Addr, error) {
			recs, err := e.a.AddressesOf(ctx, owner)
			// As ReleaseOwner: the records it read despite those it
			// could not, none on any other error.
			var skipped *store.SkippedError
			if err != nil && !errors.As(err, &skipped) {
				return nil, err
			}
			var addrs []netip.Addr
			for _, r := range recs {
				addrs = append(addrs, r.Addr)
			}
			return addrs, err
		}
	}
	if e.in.byParent {
		released, err := releaseOwner(e.ctx, e.in.parent)
		// Records the store cannot decode might be the owner's: the
		// others are released, and the command fails (exit 1, corrupt
		// data) so that a script does not take the owner for gone.
		var skipped *store.SkippedError
		if errors.As(err, &skipped) {
			warnSkipped(e, skipped, "not released")
			if err := printReleased(e, released, nil); err != nil {
				return err
			}
			return fmt.Errorf("%s may still hold %s that cannot be read (not released, see the warnings): %w", e.in.parent, counted(skipped.Count, "record"), store.ErrCorrupt)
		}
		if err != nil {
			// What was released despite the error (before --timeout or
			// Ctrl-C, or besides an address whose release failed) stays
			// released: say what, as for ADDR... below.
			printReleased(e, released, nil)
			return err
		}
		if len(released) == 0 {
			// Done, not failed: the owner holds no address, as asked.
			// Said on stderr, so that the empty output is not taken for
			// a release that printed nothing.
			fmt.Fprintf(e.stderr, "ipamctl: %s holds no address: nothing released\n", e.in.parent)
		}
		return printReleased(e, released, nil)
	}
	// An address without a record stops none of the others: a list of
	// what a script holds may name one already released. Each is named,
	// and the command exits 3 once the others are released. Any other
	// error stops it at once, saying which addresses were not tried. An
	// address named twice is released once.
	var released, missing []netip.Addr
	done := map[netip.Addr]bool{}
	for i, a := range e.in.addrs {
		if done[a] {
			continue
		}
		done[a] = true
		err := release(e.ctx, a)
		switch {
		case err == nil:
			released = append(released, a)
		case errors.Is(err, allocator.ErrNotFound):
			missing = append(missing, a)
		default:
			// What was released before the error stays released.
			printReleased(e, released, missing)
			var notTried []string
			for _, b := range e.in.addrs[i+1:] {
				if !done[b] {
					done[b] = true
					notTried = append(notTried, b.String())
				}
			}
			err = fmt.Errorf("releasing %s: %w", a, err)
			if len(notTried) > 0 {
				err = fmt.Errorf("%w; not tried: %s", err, strings.Join(notTried, ", "))
			}
			if len(missing) > 0 {
				err = fmt.Errorf("%w; before it, %v", err, addrsNotFound(missing))
			}
			return err
		}
	}
	if err := printReleased(e, released, missing); err != nil {
		return err
	}
	if len(missing) > 0 {
		return addrsNotFound(missing)
	}
	return nil
}

// addrsNotFound is the error of ip release for addresses without a record.
func addrsNotFound(addrs []netip.Addr) error {
	nf := &notFoundError{kind: "ipaddress"}
	for _, a := range addrs {
		nf.names = append(nf.names, a.String())
	}
	return nf
}

// printReleased prints the addresses released and, in -o json|yaml, those
// named that had no record (table output names them in the error); with
// --dry-run, those it would release, marked as such.
func printReleased(e *env, addrs, missing []netip.Addr) error {
	dry := e.cl.has("dry-run")
	if e.out != formatTable {
		out := struct {
			Released []string `json:"released"`
			NotFound []string `json:"notFound,omitempty"`
			// DryRun: --dry-run, so these are what it would release.
			DryRun bool `json:"dryRun,omitempty"`
		}{Released: []string{}, DryRun: dry}
		for _, a := range addrs {
			out.Released = append(out.Released, a.String())
		}
		for _, a := range missing {
			out.NotFound = append(out.NotFound, a.String())
		}
		return emit(e.stdout, e.out, out)
	}
	mark := ""
	if dry {
		mark = dryRunMark
	}
	for _, a := range addrs {
		fmt.Fprintf(e.stdout, "ipaddress/%s released%s\n", a, mark)
	}
	return nil
}

// ---- usage ----

type prefixUsage struct {
	Prefix string      `json:"prefix"`
	Size   json.Number `json:"size"`
	Used   json.Number `json:"used"`
	Free   json.Number `json:"free"`
}

type cidrUsage struct {
	Name        string        `json:"name"`
	Terminating bool          `json:"terminating"`
	Prefixes    []prefixUsage `json:"prefixes"`
}

func usageCmd(e *env) error {
	l := list[cidrUsage]{Items: []cidrUsage{}}
	for _, c := range e.a.CIDRs() {
		u, err := e.a.Usage(c.Name)
		if err != nil {
			continue // removed meanwhile
		}
		cu := cidrUsage{Name: c.Name, Terminating: u.Terminating, Prefixes: []prefixUsage{}}
		for _, p := range u.Prefixes {
			free := p.Free.String()
			if u.Terminating {
				free = "0" // a Terminating CIDR serves no new allocation
			}
			cu.Prefixes = append(cu.Prefixes, prefixUsage{
				Prefix: p.Prefix.String(), Size: json.Number(p.Size.String()), Used: json.Number(p.Used.String()), Free: json.Number(free),
			})
		}
		l.Items = append(l.Items, cu)
	}
	if e.out != formatTable {
		return emit(e.stdout, e.out, l)
	}
	t := newTable(e.stdout, "NAME", "PREFIX", "SIZE", "USED", "FREE", "STATUS")
	for _, c := range l.Items {
		for _, p := range c.Prefixes {
			t.row(c.Name, p.Prefix, p.Size.String(), p.Used.String(), p.Free.String(), cidrStatus(c.Terminating))
		}
	}
	return t.flush()
}

// ---- repair ----

// consumerEntry is one element of the --consumers file. Addresses is a
// pointer so that a missing key is told from an empty list: an owner read
// as holding nothing has its records deleted.
type consumerEntry struct {
	ParentRef json.RawMessage `json:"parentRef"`
	Addresses *[]string       `json:"addresses"`
}

// decodeStrict decodes one JSON value from data into v, refusing unknown
// keys, keys given twice and trailing data: a misspelt key in a
// --consumers file would otherwise read as an owner holding nothing, whose
// records repair deletes, and of a key given twice the decoder keeps the
// last, so that "addresses": [...], "addresses": [] holds nothing too.
func decodeStrict(data []byte, v any) error {
	if err := noKeyTwice(data); err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// noKeyTwice returns an error if an object in data gives a key twice, as
// encoding/json matches keys: ignoring case, with Unicode's simple folding
// ("Addresses" and "addreſſes" are "addresses"). Malformed JSON is left
// to the decoder to report.
func noKeyTwice(data []byte) error {
	type level struct {
		keys    map[string]bool // nil in an array
		wantKey bool
	}
	var open []level
	d := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := d.Token()
		if err != nil {
			return nil
		}
		if n := len(open); n > 0 && open[n-1].wantKey {
			if k, ok := tok.(string); ok {
				folded := strings.ToLower(strings.ToUpper(k))
				if open[n-1].keys[folded] {
					return fmt.Errorf("key %q given twice in one object", k)
				}
				open[n-1].keys[folded] = true
				open[n-1].wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			open = append(open, level{keys: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			open = append(open, level{})
			continue
		case json.Delim('}'), json.Delim(']'):
			open = open[:len(open)-1]
		}
		// A value ended: the object holding it, if any, wants a key next.
		if n := len(open); n > 0 && open[n-1].keys != nil {
			open[n-1].wantKey = true
		}
	}
}

func readConsumers(path string, e *env) ([]repair.Consumer, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = readAllContext(e.ctx, e.stdin)
	} else {
		data, err = readFileContext(e.ctx, path)
	}
	if ctxErr := e.ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return nil, fmt.Errorf("--consumers %s: %w", path, err)
	}
	if err != nil {
		return nil, usageErrorf("--consumers: %v", err)
	}
	return parseConsumers(path, data)
}

// parseConsumers decodes the --consumers file read from path.
func parseConsumers(path string, data []byte) ([]repair.Consumer, error) {
	var entries []consumerEntry
	if err := decodeStrict(data, &entries); err != nil {
		return nil, usageErrorf("--consumers %s: %v (want a JSON array of {\"parentRef\": \"services/default/x\", \"addresses\": [\"10.96.0.1\"]})", path, err)
	}
	if entries == nil {
		// null, what a broken export gives: read as no consumers, it would
		// have every record deleted. An empty list is [].
		return nil, usageErrorf("--consumers %s: null is not a list of owners; a store with no consumers is []", path)
	}
	out := make([]repair.Consumer, 0, len(entries))
	for i, en := range entries {
		var ref ipaddress.ParentRef
		var s string
		var obj parentRefObject
		switch {
		case json.Unmarshal(en.ParentRef, &s) == nil:
			var err error
			if ref, err = ipaddress.ParseParentRef(s); err != nil {
				return nil, usageErrorf("--consumers %s: entry %d: %v", path, i, err)
			}
		case decodeStrict(en.ParentRef, &obj) == nil:
			ref = ipaddress.ParentRef{Group: obj.Group, Resource: obj.Resource, Namespace: obj.Namespace, Name: obj.Name}
			if err := ref.Validate(); err != nil {
				return nil, usageErrorf("--consumers %s: entry %d: %v", path, i, err)
			}
		default:
			return nil, usageErrorf("--consumers %s: entry %d: parentRef must be a string or an object with only group, resource, namespace and name", path, i)
		}
		if en.Addresses == nil {
			return nil, usageErrorf("--consumers %s: entry %d (%s): \"addresses\" is missing; an owner holding none has \"addresses\": []", path, i, ref)
		}
		out = append(out, repair.Consumer{Ref: ref, Addrs: *en.Addresses})
	}
	return out, nil
}

type repairEvent struct {
	Kind    string `json:"kind"`
	Reason  string `json:"reason"`
	Address string `json:"address"`
	Ref     string `json:"parentRef"`
	Message string `json:"message"`
	DryRun  bool   `json:"dryRun,omitempty"`
}

type repairReport struct {
	DryRun bool `json:"dryRun"`
	// Complete is false for a pass cut short (--timeout, Ctrl-C): what it
	// did until then stands, and the records and consumers after that were
	// not checked.
	Complete   bool          `json:"complete"`
	Records    int           `json:"records"`
	Consumers  int           `json:"consumers"`
	RetryAfter string        `json:"retryAfter,omitempty"`
	Events     []repairEvent `json:"events"`
}

func repairArgs(e *env) error {
	if _, ok := e.cl.flags["consumers"]; !ok {
		return usageErrorf("repair needs --consumers FILE: the addresses each owner holds, the truth records are reconciled with (see README); without it every record would count as leaked")
	}
	if s, ok := e.cl.flags["leak-grace"]; ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return usageErrorf("--leak-grace %q: must be a duration such as 60s", s)
		}
		e.in.leakGrace = d
		if d == 0 {
			e.in.leakGrace = -1 // no grace
		}
	}
	// A dry run writes nothing: like the other reads, it neither creates
	// a mistyped --db nor takes more than a shared lock, and over etcd
	// it writes nothing either.
	dryRunAccess(e)
	return nil
}

// repairInput reads and checks repair's consumers file before the store
// is opened.
func repairInput(e *env) error {
	consumers, err := readConsumers(e.cl.flags["consumers"], e)
	if err != nil {
		return err
	}
	e.in.consumers = consumers
	return nil
}

func repairCmd(e *env) error {
	r := &repair.Repairer{
		Allocator: e.a,
		Consumers: repair.NewStatic(e.in.consumers...),
		DryRun:    e.cl.has("dry-run"),
		LeakGrace: e.in.leakGrace,
		Logger:    e.log,
	}
	rep, err := r.Run(e.ctx)
	if err != nil && e.ctx.Err() == nil {
		return err // the records or the consumers could not be listed: nothing was done
	}
	// A pass the context cut short keeps what it did until then: report
	// that, then fail.
	if perr := printRepair(e, rep, err == nil); err == nil {
		return perr
	}
	return err
}

// roundUp rounds d up to whole seconds: a pass run again any earlier than
// the report says would find the record still pending.
func roundUp(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// printRepair prints the report of a pass, complete or cut short.
func printRepair(e *env, rep repair.Report, complete bool) error {
	out := repairReport{DryRun: rep.DryRun, Complete: complete, Records: rep.Records, Consumers: rep.Consumers, Events: []repairEvent{}}
	if rep.RetryAfter > 0 {
		out.RetryAfter = roundUp(rep.RetryAfter).String()
	}
	for _, ev := range rep.Events {
		ref := ev.Ref.String()
		if ev.Ref == (ipaddress.ParentRef{}) {
			ref = "" // a record that cannot be read names no parent
		}
		out.Events = append(out.Events, repairEvent{Kind: string(ev.Kind), Reason: ev.Kind.Reason(), Address: ev.Addr, Ref: ref, Message: ev.Message, DryRun: ev.DryRun})
	}
	if e.out != formatTable {
		return emit(e.stdout, e.out, out)
	}
	if len(out.Events) > 0 {
		t := newTable(e.stdout, "KIND", "ADDRESS", "PARENTREF", "MESSAGE")
		for _, ev := range out.Events {
			t.row(ev.Kind, orNone(quoteSpaced(ev.Address)), orNone(ev.Ref), ev.Message)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	mode := ""
	if rep.DryRun {
		mode = dryRunMark
	}
	records, consumers, findings := counted(rep.Records, "record"), counted(rep.Consumers, "consumer"), counted(len(rep.Events), "finding")
	if complete {
		fmt.Fprintf(e.stdout, "checked %s and %s: %s%s\n", records, consumers, findings, mode)
	} else {
		fmt.Fprintf(e.stdout, "pass cut short: %s until then, not all of the %s and %s checked%s\n", findings, records, consumers, mode)
	}
	if rep.RetryAfter > 0 {
		fmt.Fprintf(e.stdout, "some records are younger than the leak grace: run again in %s\n", out.RetryAfter)
	}
	return nil
}

// quoteSpaced returns s, or s quoted (strconv.Quote) when it holds white
// space: a consumer's address text, which repair reports as written,
// would read as two cells of its table. (Every table quotes a cell that is
// not printable: table.row.)
func quoteSpaced(s string) string {
	if strings.ContainsFunc(s, unicode.IsSpace) {
		return strconv.Quote(s)
	}
	return s
}

// orNone is s, or "<none>" for a table cell it would leave blank.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// counted writes n things: "1 record", "2 records", "0 records".
func counted(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
