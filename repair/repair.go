// Package repair reconciles the allocation records of a store with the
// truth of their consumers (SPEC section 6): the embedder says which
// owners exist and which addresses each of them holds (for an apiserver,
// the Services and their ClusterIPs), and a pass
//
//   - reports consumer addresses that do not parse (Invalid) or lie in no
//     CIDR (OutOfRange, the reference's ClusterIPOutOfRange); an Invalid
//     address that still denotes one under the legacy reading
//     ("010.96.0.5") keeps that address's record;
//   - creates the missing record of a consumer address ("not allocated;
//     repairing"), also in the reserved lower band and also inside a
//     Terminating CIDR, whose removal then waits for the address;
//   - deletes a record whose parent is gone ("appears to have leaked:
//     cleaning up") or whose parent exists but does not hold the address
//     ("wrong reference"), once the record is older than a grace period
//     (60 s by default, the apiserver's request timeout): a younger record
//     may belong to an allocation whose consumer is still being written.
//     When one consumer holds the address, the record is handed to it in
//     the write that takes it from its parent (allocator.ReplaceRecords),
//     so no other allocation can take the address in between. Records
//     are handed over once every record is checked, and deleted
//     last, once every consumer address has its record: a deletion may
//     let a Terminating CIDR be removed (also one that turned Terminating
//     during the pass), which must not happen under an address still to
//     be recorded;
//   - reports an address held by several consumers ("already allocated"),
//     counting a legacy spelling as a holder, and changes nothing about it;
//   - reports a record the store holds but cannot decode (Failed, its Err
//     matching store.ErrCorrupt and naming the key; see
//     store.Store.ListAddresses) and goes on with the others. Such a
//     record is never deleted, replaced nor written over: its address
//     stays taken, and a consumer holding it gets no record of its own,
//     until an operator fixes or removes the key.
//
// Beyond the reference, the grace period also protects a young record from
// the wrong-reference deletion, which closes the race of an address just
// allocated to an existing consumer that has not yet been updated with it;
// and a record is deleted only if it is still the one listed (same
// revision), so a pass never deletes an address released and re-allocated
// meanwhile.
//
// A pass is one call of Run; run it periodically and after RetryAfter when
// something is pending. With DryRun set it reports the same findings and
// changes nothing. A pass whose context ends stops and returns the
// context's error; what it did until then stands, and leaves no address a
// consumer holds without a record.
package repair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// DefaultLeakGrace is how old a record must be before a pass deletes it as
// leaked or wrongly referenced: the Kubernetes apiserver's request timeout,
// as the reference repair loop uses.
const DefaultLeakGrace = 60 * time.Second

// Consumer is an owner of addresses and the addresses it says it holds.
// Addresses are strings because a consumer's may not parse.
type Consumer struct {
	Ref   ipaddress.ParentRef
	Addrs []string
}

// Consumers is the embedder's truth about the owners of addresses.
type Consumers interface {
	// List returns every consumer and its addresses. A consumer listed
	// twice counts as one holding the union of its addresses.
	List(ctx context.Context) ([]Consumer, error)
	// Exists reports whether ref exists now. It is asked about the parents
	// of records that List did not return, so a consumer created after
	// List is not taken for a missing one; and about a listed consumer
	// whose unrecorded address another owner took meanwhile, so a
	// consumer deleted after List is not taken for a second holder.
	Exists(ctx context.Context, ref ipaddress.ParentRef) (bool, error)
}

// Observer receives what repair passes find, for metrics. Dry-run passes
// are not observed.
type Observer interface {
	// RepairEvent is called for every finding, as it is made.
	RepairEvent(Event)
	// RepairDone is called at the end of every pass with its error (nil
	// when the pass completed; findings are not errors).
	RepairDone(Report, error)
}

// Repairer runs repair passes over the records of an allocator's store.
type Repairer struct {
	// Allocator gives the CIDRs, the store whose records are checked, and
	// makes the repairs, each in as few writes as the store allows:
	// RestoreRecords (not observed: no allocation metric counts a
	// repair); ReplaceRecords, which hands a record to its consumer with
	// the address never free; and ReleaseRecords. The last two act on
	// the records as the pass listed them.
	Allocator *allocator.Allocator
	// Consumers is the truth the records are reconciled with.
	Consumers Consumers
	// LeakGrace is how old a record must be to be deleted as leaked or
	// wrongly referenced. Zero means DefaultLeakGrace; negative means no
	// grace at all: the first pass cleans up, whatever a record's age.
	// Otherwise a record's age counts from the latest time its stamp may
	// stand for: the end of its second for a stamp of whole seconds.
	LeakGrace time.Duration
	// Now is the clock the records' ages are measured with; time.Now when
	// nil.
	Now func() time.Time
	// DryRun reports what a pass would do and changes nothing.
	DryRun bool
	// Logger receives one line per finding. Quiet when nil.
	Logger *slog.Logger
	// Observer, when set, receives the findings (for metrics).
	Observer Observer
}

func (r *Repairer) grace() time.Duration {
	switch {
	case r.LeakGrace == 0:
		return DefaultLeakGrace
	case r.LeakGrace < 0:
		return 0
	}
	return r.LeakGrace
}

func (r *Repairer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// pass is the state of one Run.
type pass struct {
	r      *Repairer
	a      *allocator.Allocator
	st     store.Store
	log    *slog.Logger
	index  *cidrset.Index
	now    time.Time
	grace  time.Duration
	report Report

	records map[netip.Addr]ipaddress.IPAddress   // as listed, less those deleted
	deleted map[netip.Addr]bool                  // deleted by this pass (or would be)
	holders map[netip.Addr][]ipaddress.ParentRef // consumers per address, legacy spellings included
	holds   map[ipaddress.ParentRef]map[netip.Addr]bool
	// legacy holds the addresses some consumer lists only in a spelling
	// ParseAddr refuses but ParseAddrLegacy reads ("010.96.0.5",
	// "FD00::5"): reported Invalid, never freed.
	legacy map[netip.Addr]bool
	// unreadable holds the addresses of the records the listing left out
	// as undecodable (as far as the store named them): reported, and
	// never given a record of a consumer's.
	unreadable map[netip.Addr]bool
	// later holds the cleanups of records, made after the consumers'
	// addresses are checked: deleting a record may let a Terminating CIDR
	// (one by now, if not when the pass read the CIDRs) be removed, and a
	// consumer address in that CIDR still to be given its record would
	// then be in none.
	later []cleanup
	// handovers holds the records the pass gives to the consumers holding
	// their addresses, after the records are checked and before the
	// consumers are.
	handovers []handover
	// restores holds the consumers' addresses the pass writes records of,
	// after the consumers are checked, in as few writes as the store
	// allows, and before the cleanups.
	restores []restore
}

// restore is an address ref holds that has no record.
type restore struct {
	ref  ipaddress.ParentRef
	addr netip.Addr
}

// cleanup is a record the pass deletes, with what it reports of it.
type cleanup struct {
	rec  ipaddress.IPAddress
	kind Kind
	age  time.Duration
	msg  string
}

// handover is a record the pass gives to heir, the consumer holding its
// address, with what it reports of it.
type handover struct {
	cleanup
	heir ipaddress.ParentRef
}

// Run makes one repair pass. The error is for a pass that could not be
// made (the records or the consumers could not be listed) or was cut short
// by ctx; problems with single addresses are events of the report (Failed
// for errors), and the pass goes on. Records the store cannot decode (a
// listing's *store.SkippedError) are such problems: each named one is a
// Failed event, the pass checks every other record.
//
// A Repairer without an Allocator or Consumers makes no pass: the error is
// an *ipaddress.FieldError naming the field (it matches
// ipaddress.ErrInvalid). Nor does one whose Allocator is closed (the zero
// Allocator too), whose CIDRs no longer follow the store: the error
// matches allocator.ErrClosed.
func (r *Repairer) Run(ctx context.Context) (rep Report, err error) {
	switch {
	case r.Allocator == nil:
		return Report{}, &ipaddress.FieldError{Field: "Allocator", Required: true, Detail: "a Repairer needs an allocator to read and repair records"}
	case r.Consumers == nil:
		return Report{}, &ipaddress.FieldError{Field: "Consumers", Required: true, Detail: "a Repairer needs the consumers to reconcile records with"}
	}
	p := &pass{
		r:          r,
		a:          r.Allocator,
		st:         r.Allocator.Store(),
		log:        r.Logger,
		now:        r.now(),
		grace:      r.grace(),
		records:    map[netip.Addr]ipaddress.IPAddress{},
		deleted:    map[netip.Addr]bool{},
		holders:    map[netip.Addr][]ipaddress.ParentRef{},
		holds:      map[ipaddress.ParentRef]map[netip.Addr]bool{},
		legacy:     map[netip.Addr]bool{},
		unreadable: map[netip.Addr]bool{},
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.report.DryRun = r.DryRun
	if r.Observer != nil && !r.DryRun {
		defer func() { r.Observer.RepairDone(rep, err) }()
	}
	// Fails with ErrClosed once the allocator is closed, whatever the
	// revision: its index, which the pass reads the CIDRs from, is stale.
	if err := r.Allocator.WaitRevision(ctx, 0); err != nil {
		return p.report, fmt.Errorf("repair: %w", err)
	}
	// Records first, consumers second: an address allocated and handed to
	// its consumer between the two listings is then seen as held by a
	// consumer without a record, and the repair's Allocate finds the
	// record already there (see repair), rather than as a record without
	// its consumer.
	recs, err := p.st.ListAddresses(ctx)
	var skipped *store.SkippedError
	if err != nil && !errors.As(err, &skipped) {
		return p.report, fmt.Errorf("repair: listing records: %w", err)
	}
	consumers, err := r.Consumers.List(ctx)
	if err != nil {
		return p.report, fmt.Errorf("repair: listing consumers: %w", err)
	}
	p.index = cidrset.NewIndex(p.a.CIDRs())
	p.report.Records = len(recs)
	if skipped != nil {
		p.report.Records += skipped.Count
	}

	// Merge consumers listed twice, keeping the first-seen order.
	var order []ipaddress.ParentRef
	addrs := map[ipaddress.ParentRef][]string{}
	for _, c := range consumers {
		if _, ok := addrs[c.Ref]; !ok {
			order = append(order, c.Ref)
			addrs[c.Ref] = []string{}
		}
		for _, s := range c.Addrs {
			if !slices.Contains(addrs[c.Ref], s) {
				addrs[c.Ref] = append(addrs[c.Ref], s)
			}
		}
	}
	p.report.Consumers = len(order)
	for _, ref := range order {
		p.holds[ref] = map[netip.Addr]bool{}
		for _, s := range addrs[ref] {
			a, err := ipaddress.ParseAddr(s)
			if err != nil {
				// A legacy spelling holds the address as far as
				// uniqueness goes (the reference reads it so), though
				// no record is made for it.
				if a, ok := ipaddress.ParseAddrLegacy(s); ok {
					p.legacy[a] = true
					if !slices.Contains(p.holders[a], ref) {
						p.holders[a] = append(p.holders[a], ref)
					}
				}
				continue
			}
			if p.holds[ref][a] {
				continue
			}
			p.holds[ref][a] = true
			if !slices.Contains(p.holders[a], ref) {
				p.holders[a] = append(p.holders[a], ref)
			}
		}
	}

	if skipped != nil {
		p.reportUnreadable(skipped)
	}
	slices.SortFunc(recs, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	for _, rec := range recs {
		p.records[rec.Addr] = rec
	}
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return p.report, err
		}
		p.checkRecord(ctx, rec)
	}
	p.handOver(ctx)
	for _, ref := range order {
		for _, s := range addrs[ref] {
			if err := ctx.Err(); err != nil {
				return p.report, err
			}
			p.checkConsumerAddr(ctx, ref, s)
		}
	}
	if err := ctx.Err(); err != nil {
		return p.report, err
	}
	if !p.restore(ctx) {
		return p.report, ctx.Err()
	}
	p.cleanUp(ctx)
	// The last item's store call may have been cut short.
	return p.report, ctx.Err()
}

// fail records that an item could not be handled, unless err is the
// pass's context ending: Run returns that, and it is no repair error.
func (p *pass) fail(ctx context.Context, e Event) {
	if ctx.Err() != nil && errors.Is(e.Err, ctx.Err()) {
		return
	}
	e.Kind = Failed
	p.emit(e)
}

// emit records an event, logs it and tells the observer.
func (p *pass) emit(e Event) {
	e.DryRun = p.r.DryRun && (e.Kind == Repaired || e.Kind == Leak || e.Kind == WrongReference)
	if e.DryRun {
		e.Message += " (dry run: not changed)"
	}
	p.report.Events = append(p.report.Events, e)
	attrs := []any{"kind", string(e.Kind), "addr", e.Addr, "ref", e.Ref.String()}
	if e.Err != nil {
		attrs = append(attrs, "err", e.Err)
	}
	switch {
	case e.Kind.Pending():
		p.log.Debug(e.Message, attrs...)
	case e.Kind == Repaired:
		p.log.Info(e.Message, attrs...)
	default:
		p.log.Warn(e.Message, attrs...)
	}
	if p.r.Observer != nil && !p.r.DryRun {
		p.r.Observer.RepairEvent(e)
	}
}

func (p *pass) pending(remaining time.Duration) {
	if remaining <= 0 {
		remaining = time.Nanosecond
	}
	if p.report.RetryAfter == 0 || remaining < p.report.RetryAfter {
		p.report.RetryAfter = remaining
	}
}

// reportUnreadable reports the records the listing left out, which the
// pass can neither check nor touch: whose a record is cannot be known, so
// deleting it could free an address a consumer holds, and writing over it
// would lose what an operator may still recover from it.
func (p *pass) reportUnreadable(se *store.SkippedError) {
	for _, r := range se.Records {
		if !r.Addr.IsValid() {
			p.emit(Event{Kind: Failed, Err: r.Err,
				Message: fmt.Sprintf("a record cannot be read, nor its address told: left as it is; fix or remove it by hand (%v)", r.Err)})
			continue
		}
		p.unreadable[r.Addr] = true
		held := ""
		if h := p.holders[r.Addr]; len(h) > 0 {
			held = "; held by " + joinRefs(h)
		}
		p.emit(Event{Kind: Failed, Addr: r.Addr.String(), Err: r.Err,
			Message: fmt.Sprintf("record of %s cannot be read: left as it is, its address stays taken%s; fix or remove it by hand (%v)", r.Addr, held, r.Err)})
	}
	if more := se.Count - len(se.Records); more > 0 {
		p.emit(Event{Kind: Failed, Err: fmt.Errorf("%d records: %w", more, store.ErrCorrupt),
			Message: fmt.Sprintf("%d more records cannot be read (the store names only the first %d): left as they are; fix or remove them by hand", more, len(se.Records))})
	}
}

// checkRecord checks one record against its parent.
func (p *pass) checkRecord(ctx context.Context, rec ipaddress.IPAddress) {
	addr := rec.Addr.String()
	holders := p.holders[rec.Addr]
	if len(holders) > 1 {
		return // a duplicate: reported with the consumers, left alone
	}
	if p.holds[rec.Parent][rec.Addr] {
		return // consistent
	}
	if p.legacy[rec.Addr] {
		// A consumer still uses the address, in a spelling reported
		// Invalid: whoever the record names, freeing it would let the
		// address be handed out twice.
		return
	}
	kind, pendingKind := WrongReference, WrongReferencePending
	if _, listed := p.holds[rec.Parent]; !listed {
		exists, err := p.r.Consumers.Exists(ctx, rec.Parent)
		if err != nil {
			p.fail(ctx, Event{Kind: Failed, Addr: addr, Ref: rec.Parent, Err: err,
				Message: fmt.Sprintf("unable to get parent %s of %s due to an unknown error: %v", rec.Parent, addr, err)})
			return
		}
		if exists {
			// Created after List: whether it holds the address is for
			// the next pass to see.
			return
		}
		kind, pendingKind = Leak, LeakPending
	}
	age := p.now.Sub(rec.Created)
	// youngest is the least the record's age may be, for the grace: a
	// stamp of whole seconds (the memory store's) may stand for any time
	// in its second, so the record may be a second younger than its stamp
	// says. Reports give the age the stamp says.
	youngest := age
	switch {
	case rec.Created.IsZero():
		age, youngest = 0, p.grace+1 // a store that does not stamp records: no grace
	case rec.Created.Nanosecond() == 0:
		youngest -= time.Second
	}
	// A record created after the pass read its clock, in a later second,
	// has a stamp after now: its age is nil, not negative.
	age = max(age, 0)
	// No grace (LeakGrace < 0) keeps nothing back, however young.
	if p.r.LeakGrace >= 0 && youngest <= p.grace {
		var msg string
		if kind == Leak {
			msg = fmt.Sprintf("%s of %s has no parent, but was created %s ago (grace %s): checking again later", addr, rec.Parent, age.Round(time.Millisecond), p.grace)
		} else {
			msg = fmt.Sprintf("%s for %s is not held by it, but was created %s ago (grace %s): checking again later", addr, rec.Parent, age.Round(time.Millisecond), p.grace)
		}
		p.emit(Event{Kind: pendingKind, Addr: addr, Ref: rec.Parent, Age: age, Message: msg})
		p.pending(p.grace - youngest + 1)
		return
	}
	var msg string
	if kind == Leak {
		msg = fmt.Sprintf("%s of %s appears to have leaked: cleaning up", addr, rec.Parent)
	} else {
		msg = fmt.Sprintf("%s has a wrong reference: its parent %s does not hold it; cleaning up", addr, rec.Parent)
	}
	heir, handOver := p.heir(rec.Addr)
	if !handOver {
		// Not held by a consumer that gets it: for the consumer phase
		// it is gone already, in the store it stays until that phase is
		// over, also inside CIDRs the pass read as live: one may turn
		// Terminating after the pass read the CIDRs, and deleting its
		// last record would then let it go under a consumer address the
		// pass has yet to record.
		delete(p.records, rec.Addr)
		p.deleted[rec.Addr] = true
		p.later = append(p.later, cleanup{rec: rec, kind: kind, age: age, msg: msg})
		return
	}
	p.handovers = append(p.handovers, handover{cleanup: cleanup{rec: rec, kind: kind, age: age, msg: msg}, heir: heir})
}

// handOver gives the records of p.handovers to their heirs and reports
// them. Deleting a record and creating the consumer's later would leave
// the address free in between, for any allocator sharing the store to hand
// out: one write moves each instead, and the allocator writes them in as
// few writes as its store allows (allocator.ReplaceRecords).
func (p *pass) handOver(ctx context.Context) {
	errs := make([]error, len(p.handovers)) // a dry run's: none
	if !p.r.DryRun {
		recs := make([]ipaddress.IPAddress, len(p.handovers))
		to := make([]ipaddress.ParentRef, len(p.handovers))
		for i, h := range p.handovers {
			recs[i], to[i] = h.rec, h.heir
		}
		errs = p.a.ReplaceRecords(ctx, recs, to)
	}
	for i, h := range p.handovers {
		rec, addr := h.rec, h.rec.Addr.String()
		if !p.written(ctx, errs[i], rec, fmt.Sprintf("unable to hand %s from %s to %s", addr, rec.Parent, h.heir)) {
			continue
		}
		p.emit(Event{Kind: h.kind, Addr: addr, Ref: rec.Parent, Age: h.age, Message: h.msg})
		// The consumer's now, as it holds it: its own check finds it so.
		p.records[rec.Addr] = ipaddress.IPAddress{Addr: rec.Addr, Parent: h.heir}
		p.emit(Event{Kind: Repaired, Addr: addr, Ref: h.heir, Message: p.repairedMsg(h.heir, rec.Addr, p.terminatingOnly(rec.Addr))})
	}
}

// written reports whether the write a repair of rec made succeeded (err is
// nil). A record gone or changed since the listing is no finding any
// more: nothing of what was found stands. Another error is reported as
// Failed, with the message what.
func (p *pass) written(ctx context.Context, err error, rec ipaddress.IPAddress, what string) bool {
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
		delete(p.records, rec.Addr)
		return false
	case err != nil:
		p.fail(ctx, Event{Kind: Failed, Addr: rec.Addr.String(), Ref: rec.Parent, Err: err,
			Message: fmt.Sprintf("%s: %v", what, err)})
		return false
	}
	return true
}

// cleanUp deletes the records of p.later, each unless the store no longer
// holds it as listed, and reports them. The allocator deletes them in as
// few writes as its store allows (allocator.ReleaseRecords), and re-checks
// the Terminating CIDRs they may have been holding.
func (p *pass) cleanUp(ctx context.Context) {
	errs := make([]error, len(p.later)) // a dry run's: none
	if !p.r.DryRun {
		recs := make([]ipaddress.IPAddress, len(p.later))
		for i, c := range p.later {
			recs[i] = c.rec
		}
		errs = p.a.ReleaseRecords(ctx, recs)
	}
	for i, c := range p.later {
		rec, addr := c.rec, c.rec.Addr.String()
		if !p.written(ctx, errs[i], rec, fmt.Sprintf("unable to release %s of %s", addr, rec.Parent)) {
			continue
		}
		p.emit(Event{Kind: c.kind, Addr: addr, Ref: rec.Parent, Age: c.age, Message: c.msg})
		delete(p.records, rec.Addr)
		p.deleted[rec.Addr] = true
	}
}

// heir returns the consumer a wrongly owned record of a should go to: the
// one consumer holding a, in a spelling that gets a record, with a inside
// a CIDR, and an owner the allocator would take (otherwise the record is
// deleted, and the consumer's own repair reports why it gets none). The
// pass's CIDRs may be stale, but none holding a can have gone since: the
// record holds it.
func (p *pass) heir(a netip.Addr) (ipaddress.ParentRef, bool) {
	holders := p.holders[a]
	if len(holders) != 1 || !p.holds[holders[0]][a] || !p.inRange(a) || holders[0].Validate() != nil {
		return ipaddress.ParentRef{}, false
	}
	return holders[0], true
}

// terminatingOnly returns the Terminating CIDRs holding a when no live one
// does, as the pass read them.
func (p *pass) terminatingOnly(a netip.Addr) []string {
	if p.liveAt(a) {
		return nil
	}
	return p.terminatingAt(a)
}

// repairedMsg is the message of a record made for ref, inside the
// Terminating CIDRs dying (none: a live CIDR).
func (p *pass) repairedMsg(ref ipaddress.ParentRef, a netip.Addr, dying []string) string {
	msg := fmt.Sprintf("[%s] %s of %s is not allocated; repairing", ipaddress.FamilyOf(a), a, ref)
	if len(dying) > 0 {
		when := "now waits"
		if p.r.DryRun {
			when = "would wait"
		}
		msg += fmt.Sprintf(" (inside Terminating CIDR %s, whose removal %s for it)", strings.Join(dying, ", "), when)
	}
	return msg
}

// inRange reports whether a CIDR (live or Terminating) host-contains a.
func (p *pass) inRange(a netip.Addr) bool {
	found := false
	p.index.Containing(a, func(*cidrset.CIDR, netip.Prefix) bool {
		found = true
		return false
	})
	return found
}

// checkConsumerAddr checks one address a consumer holds.
func (p *pass) checkConsumerAddr(ctx context.Context, ref ipaddress.ParentRef, s string) {
	a, err := ipaddress.ParseAddr(s)
	if err != nil {
		p.emit(Event{Kind: Invalid, Addr: s, Ref: ref, Err: err,
			Message: fmt.Sprintf("address %q of %s is not a valid IP (%v); please recreate it", s, ref, err)})
		return
	}
	fam := ipaddress.FamilyOf(a)
	if !p.inRange(a) {
		p.emit(Event{Kind: OutOfRange, Addr: s, Ref: ref,
			Message: fmt.Sprintf("ClusterIPOutOfRange: [%s] %s of %s is not within any CIDR; please recreate it", fam, s, ref)})
		return
	}
	if holders := p.holders[a]; len(holders) > 1 {
		// Report once per address, by its first holder in a spelling that
		// parses (a legacy one is reported Invalid, not here).
		if i := slices.IndexFunc(holders, func(h ipaddress.ParentRef) bool { return p.holds[h][a] }); holders[i] == ref {
			p.emit(Event{Kind: Duplicate, Addr: s, Ref: ref, Holders: slices.Clone(holders),
				Message: fmt.Sprintf("[%s] %s is already allocated: held by %s; please recreate all but one", fam, s, joinRefs(holders))})
		}
		return
	}
	if _, ok := p.records[a]; ok {
		// Held by ref (consistent), or by a record the record pass left
		// for later: nothing to do now.
		return
	}
	if p.unreadable[a] {
		// A record is there, reported as unreadable with its holder:
		// whose it is cannot be told, and it stays as it is.
		return
	}
	p.restores = append(p.restores, restore{ref: ref, addr: a})
}

// restore writes the records of p.restores, through the allocator, which
// creates them in as few writes as its store allows
// (allocator.RestoreRecords), and reports each. A dry run asks the
// allocator about each in turn instead, and stops when ctx ends, which it
// reports false.
func (p *pass) restore(ctx context.Context) bool {
	if p.r.DryRun {
		for _, r := range p.restores {
			if ctx.Err() != nil {
				return false
			}
			p.repair(ctx, r.ref, r.addr, nil, nil)
		}
		return true
	}
	recs := make([]ipaddress.IPAddress, len(p.restores))
	for i, r := range p.restores {
		recs[i] = ipaddress.IPAddress{Addr: r.addr, Parent: r.ref}
	}
	errs := p.a.RestoreRecords(ctx, recs)
	adopted := p.adoptAll(ctx, recs, errs)
	// Every outcome is reported, ctx ended or not: the records written
	// stand.
	for i, err := range errs {
		p.repair(ctx, recs[i].Parent, recs[i].Addr, err, adopted[i])
	}
	return true
}

// repair reports the record of a, held by ref, as restored, with the
// error restoring it gave (a dry run: whether it would be), or as adopted
// by the Terminating CIDRs adoptedBy (adoptAll's; then restored is nil).
func (p *pass) repair(ctx context.Context, ref ipaddress.ParentRef, a netip.Addr, restored error, adoptedBy []string) {
	s, fam := a.String(), ipaddress.FamilyOf(a)
	msg := p.repairedMsg(ref, a, nil)
	var err error
	if p.r.DryRun {
		err = p.a.DryRun().Allocate(ctx, a, ref)
		if errors.Is(err, allocator.ErrAllocated) && p.deleted[a] {
			err = nil // held by the record this pass would delete
		}
		if errors.Is(err, allocator.ErrTerminating) {
			err = nil
			msg = p.repairedMsg(ref, a, p.terminatingAt(a))
		}
	} else {
		// Restored, not allocated: the record is written back, nobody
		// asked for an address, and the metrics count only requests. The
		// allocator decides from its view of the CIDRs, which may be newer
		// than the pass's: a CIDR may have turned Terminating since.
		err = restored
		switch {
		case adoptedBy != nil:
			msg = p.repairedMsg(ref, a, adoptedBy)
		case errors.Is(err, allocator.ErrTerminating):
			var names []string
			names, err = p.adopt(ctx, ref, a)
			if err == nil {
				msg = p.repairedMsg(ref, a, names)
			}
		}
	}
	// The address is taken (a dry run, which reads the record, fails on
	// one it cannot decode): read by whom.
	var cur ipaddress.IPAddress
	var gerr error
	if errors.Is(err, allocator.ErrAllocated) || errors.Is(err, store.ErrCorrupt) {
		cur, gerr = p.st.GetAddress(ctx, a)
	}
	switch {
	case err == nil:
		p.emit(Event{Kind: Repaired, Addr: s, Ref: ref, Message: msg})
	case errors.Is(gerr, store.ErrCorrupt):
		// A record the listing did not name (past the store's limit, or
		// damaged since): taken, by whom cannot be read.
		p.emit(Event{Kind: Failed, Addr: s, Ref: ref, Err: gerr,
			Message: fmt.Sprintf("[%s] %s of %s has a record that cannot be read: left as it is, its address stays taken; fix or remove it by hand (%v)", fam, s, ref, gerr)})
	case errors.Is(err, allocator.ErrAllocated):
		// Allocated since the listing: by ref itself (a consumer
		// written just after its allocation) or by another owner.
		if gerr == nil && cur.Parent == ref {
			return
		}
		// By another owner: a second holder, unless ref is gone since
		// the listing (deleted, its address released and handed out
		// again), when the address is the new owner's alone.
		if exists, xerr := p.r.Consumers.Exists(ctx, ref); xerr == nil && !exists {
			return
		}
		holders := []ipaddress.ParentRef{ref}
		if gerr == nil {
			holders = append(holders, cur.Parent)
		}
		p.emit(Event{Kind: Duplicate, Addr: s, Ref: ref, Holders: holders,
			Message: fmt.Sprintf("[%s] %s of %s is already allocated: held by %s", fam, s, ref, joinRefs(holders))})
	case errors.Is(err, allocator.ErrNotInRange), errors.Is(err, allocator.ErrMismatch):
		// The CIDR went away since the pass read them.
		p.emit(Event{Kind: OutOfRange, Addr: s, Ref: ref, Err: err,
			Message: fmt.Sprintf("ClusterIPOutOfRange: [%s] %s of %s is not within any CIDR; please recreate it", fam, s, ref)})
	default:
		p.fail(ctx, Event{Kind: Failed, Addr: s, Ref: ref, Err: err, Full: errors.Is(err, allocator.ErrFull),
			Message: fmt.Sprintf("unable to allocate [%s] %s of %s due to an error: %v", fam, s, ref, err)})
	}
}

// liveAt reports whether a live CIDR host-contains a.
func (p *pass) liveAt(a netip.Addr) bool {
	live := false
	p.index.Containing(a, func(c *cidrset.CIDR, _ netip.Prefix) bool {
		live = !c.Terminating
		return !live
	})
	return live
}

// terminatingAt returns the Terminating CIDRs that host-contain a.
func (p *pass) terminatingAt(a netip.Addr) []string {
	var names []string
	p.index.Containing(a, func(c *cidrset.CIDR, _ netip.Prefix) bool {
		if c.Terminating && !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
		return true
	})
	return names
}

// adoptBatch is how many records adoptAll writes in one store call:
// store/etcd's MaxBatch, as the allocator's batched writes.
const adoptBatch = 64

// adoptAll adopts the records recs[i] whose restore errs[i] refused with
// ErrTerminating as adopt does, but up to adoptBatch in one write: the
// records whose first Terminating CIDR is the same share its touching
// fence. For each record adopted it sets errs[i] to nil and returns, at i,
// the Terminating CIDRs containing it; the records of a write whose
// outcome the store could not tell get its ErrOutcomeUnknown. The records
// of a write the store refused as a whole (an address taken, the CIDR
// gone since), or whose CIDR could not be read, keep ErrTerminating, for
// adopt to take one by one, reading the CIDRs again, so that each gets
// its own outcome.
func (p *pass) adoptAll(ctx context.Context, recs []ipaddress.IPAddress, errs []error) [][]string {
	adopted := make([][]string, len(recs))
	if !slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, allocator.ErrTerminating) }) {
		return adopted
	}
	// Read the CIDRs once, newer than the pass's, as adopt does.
	p.index = cidrset.NewIndex(p.a.CIDRs())
	var order []string // first Terminating CIDRs, in the order first met
	groups := map[string][]int{}
	for i, err := range errs {
		if !errors.Is(err, allocator.ErrTerminating) {
			continue
		}
		names := p.terminatingAt(recs[i].Addr)
		if len(names) == 0 {
			continue
		}
		if _, ok := groups[names[0]]; !ok {
			order = append(order, names[0])
		}
		groups[names[0]] = append(groups[names[0]], i)
		adopted[i] = names
	}
	for _, name := range order {
		c, err := p.a.GetCIDR(name)
		for at := range slices.Chunk(groups[name], adoptBatch) {
			if err == nil && ctx.Err() == nil {
				batch := make([]ipaddress.IPAddress, len(at))
				for j, i := range at {
					batch[j] = ipaddress.IPAddress{Addr: recs[i].Addr, Parent: recs[i].Parent}
				}
				// Touch: as adopt's, so that a removal of the CIDR decided
				// before these records existed fails.
				_, werr := p.st.CreateAddresses(ctx, batch, store.Fence{CIDR: c.Name, Revision: c.Revision, Touch: true})
				if werr == nil {
					for _, i := range at {
						errs[i] = nil
					}
					continue
				}
				if errors.Is(werr, store.ErrOutcomeUnknown) {
					// Written or not: each reports it, as adopt's own write
					// would; adopt would find them held and say nothing.
					for _, i := range at {
						errs[i] = werr
					}
				}
			}
			for _, i := range at {
				adopted[i] = nil // not adopted here
			}
		}
	}
	return adopted
}

// adopt records a, held by ref, inside the Terminating CIDRs containing it
// (the allocator serves no address from those), fenced on one of them, so
// that it is not removed while a consumer holds the address. The CIDRs are
// read again from the allocator first: the pass's may be older than the
// ErrTerminating that sent the repair here, and a CIDR removed meanwhile
// leaves the others to try.
func (p *pass) adopt(ctx context.Context, ref ipaddress.ParentRef, a netip.Addr) ([]string, error) {
	var gone []string // removed per the store, though the allocator may not know yet
	for attempt := 0; ; attempt++ {
		p.index = cidrset.NewIndex(p.a.CIDRs())
		names := slices.DeleteFunc(p.terminatingAt(a), func(n string) bool { return slices.Contains(gone, n) })
		if len(names) == 0 {
			return nil, &allocator.RangeError{Addr: a}
		}
		c, err := p.a.GetCIDR(names[0])
		if errors.Is(err, allocator.ErrNotFound) && attempt < 3 {
			gone = append(gone, names[0]) // removed since the CIDRs were read
			continue
		}
		if err != nil {
			return nil, err
		}
		// Touch: a removal of the CIDR decided before this record existed
		// was fenced on the revision read here, and must fail.
		_, err = p.st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: ref}},
			store.Fence{CIDR: c.Name, Revision: c.Revision, Touch: true})
		switch {
		case err == nil:
			return names, nil
		case errors.Is(err, store.ErrExists):
			return nil, allocator.ErrAllocated
		case errors.Is(err, store.ErrFenced) && attempt < 3:
			// The allocator's view lags the store: let it catch up.
			sc, gerr := p.st.GetCIDR(ctx, c.Name)
			switch {
			case gerr == nil:
				if err := p.a.WaitRevision(ctx, sc.Revision); err != nil {
					return nil, err
				}
			case errors.Is(gerr, store.ErrNotFound):
				gone = append(gone, c.Name)
			default:
				return nil, gerr
			}
			continue
		}
		return nil, err
	}
}

func joinRefs(refs []ipaddress.ParentRef) string {
	s := make([]string, len(refs))
	for i, r := range refs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// Static is a fixed set of consumers: List returns them and Exists tells
// whether a ref is among them. For tools (ipamctl's --consumers file) and
// tests: every record whose parent is not in the set counts as leaked.
// It shares no memory with its callers: NewStatic copies the consumers it
// is given, addresses included, and List returns a copy, so that changing
// either changes no set.
type Static struct {
	consumers []Consumer
	refs      map[ipaddress.ParentRef]bool
}

// NewStatic returns the consumers cs as a Consumers.
func NewStatic(cs ...Consumer) *Static {
	s := &Static{consumers: cloneConsumers(cs), refs: map[ipaddress.ParentRef]bool{}}
	for _, c := range cs {
		s.refs[c.Ref] = true
	}
	return s
}

// List implements Consumers.
func (s *Static) List(context.Context) ([]Consumer, error) { return cloneConsumers(s.consumers), nil }

// cloneConsumers returns a copy of cs whose Addrs are copies too.
func cloneConsumers(cs []Consumer) []Consumer {
	out := slices.Clone(cs)
	for i := range out {
		out[i].Addrs = slices.Clone(out[i].Addrs)
	}
	return out
}

// Exists implements Consumers.
func (s *Static) Exists(_ context.Context, ref ipaddress.ParentRef) (bool, error) {
	return s.refs[ref], nil
}
