package etcd

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/store"
)

// model is a Watcher that keeps the state it was told, and notes any event
// that goes back in revision.
type model struct {
	mu       sync.Mutex
	resets   int
	rev      int64
	cidrs    map[string]cidrset.CIDR
	addrs    map[netip.Addr]bool
	backward []string
}

func newModel() *model { return &model{cidrs: map[string]cidrset.CIDR{}, addrs: map[netip.Addr]bool{}} }

func (m *model) Reset(s store.Snapshot) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resets++
	m.rev = s.Revision
	clear(m.cidrs)
	clear(m.addrs)
	for _, c := range s.CIDRs {
		m.cidrs[c.Name] = c
	}
	for _, a := range s.Addrs {
		m.addrs[a] = true
	}
}

func (m *model) Apply(e store.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Revision < m.rev {
		m.backward = append(m.backward, fmt.Sprintf("event at %d after %d", e.Revision, m.rev))
	}
	m.rev = e.Revision
	switch e.Kind {
	case store.CIDRPut:
		m.cidrs[e.CIDR.Name] = e.CIDR
	case store.CIDRDeleted:
		delete(m.cidrs, e.CIDR.Name)
	case store.AddressPut:
		m.addrs[e.Address.Addr] = true
	case store.AddressDeleted:
		delete(m.addrs, e.Address.Addr)
	}
}

// state returns the model's CIDR names (with revisions) and addresses, sorted.
func (m *model) state() (resets int, cidrs []string, addrs []netip.Addr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, c := range m.cidrs {
		cidrs = append(cidrs, fmt.Sprintf("%s@%d", n, c.Revision))
	}
	for a := range m.addrs {
		addrs = append(addrs, a)
	}
	slices.Sort(cidrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	return m.resets, cidrs, addrs
}

// storeState reads the same from the store.
func storeState(t *testing.T, ctx context.Context, s *Store) (cidrs []string, addrs []netip.Addr) {
	t.Helper()
	snap, err := s.snapshot(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range snap.CIDRs {
		cidrs = append(cidrs, fmt.Sprintf("%s@%d", c.Name, c.Revision))
	}
	addrs = snap.Addrs
	slices.Sort(cidrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	return cidrs, addrs
}

// eventually retries cond until it holds or 30 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// errLog collects errors from a store's error handler.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// tcpProxy forwards loopback TCP connections to target and can cut them all
// and refuse new ones for a while, as a network partition between a client
// and its member would.
type tcpProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	paused bool
	conns  map[net.Conn]struct{}
	held   bool       // the target's bytes wait (HoldReplies)
	unheld *sync.Cond // signalled when held is cleared
	// holdAfter is how many more calls may start before replies are held
	// (HoldRepliesFromCall); 0 when not armed.
	holdAfter int
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.unheld = sync.NewCond(&p.mu)
	t.Cleanup(func() {
		_ = l.Close()
		p.ReleaseReplies()
		p.Pause()
	})
	go p.serve()
	return p
}

func (p *tcpProxy) Addr() string { return p.l.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		paused := p.paused
		p.mu.Unlock()
		if paused {
			_ = c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, u, true)
		go p.pipe(u, c, false)
	}
}

// pipe copies src to dst; replies (from the target) wait while held.
func (p *tcpProxy) pipe(dst, src net.Conn, replies bool) {
	buf := make([]byte, 32<<10)
	calls := h2Calls{preface: len(h2Preface)}
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !replies {
				// Before the bytes go on: the reply to a call that
				// starts holding must not slip through.
				p.callsStarted(calls.scan(buf[:n]))
			}
			if replies {
				p.mu.Lock()
				for p.held {
					p.unheld.Wait()
				}
				p.mu.Unlock()
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Pause cuts every connection and refuses new ones until Resume.
func (p *tcpProxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// callsStarted counts n calls started, for HoldRepliesFromCall.
func (p *tcpProxy) callsStarted(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holdAfter > 0 && n > 0 {
		p.holdAfter = max(p.holdAfter-n, 0)
		p.held = p.held || p.holdAfter == 0
	}
}

// HoldRepliesFromCall holds replies, as HoldReplies does, from the moment
// the client starts its n-th call (gRPC stream) from now on, before that
// call reaches the target: the calls before it are answered, and it is
// applied with its answer held. Calls are counted on every connection.
func (p *tcpProxy) HoldRepliesFromCall(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdAfter = n
}

// Holding reports whether replies are held: after HoldReplies, or once
// the call HoldRepliesFromCall waits for has started.
func (p *tcpProxy) Holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// HoldReplies keeps what the target sends from the client, requests still
// going through: a call etcd has applied whose answer is on its way.
func (p *tcpProxy) HoldReplies() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// ReleaseReplies lets the held replies through.
func (p *tcpProxy) ReleaseReplies() {
	p.mu.Lock()
	p.held = false
	p.unheld.Broadcast()
	p.mu.Unlock()
}

// Resume accepts connections again.
func (p *tcpProxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// h2Preface opens every HTTP/2 connection a client makes (RFC 9113 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2Calls follows the frames a gRPC client sends on one connection, read
// in pieces of any size, to count the calls it starts: each is a stream,
// opened by a HEADERS frame with a stream ID higher than any before
// (RFC 9113 4.1, 5.1.1).
type h2Calls struct {
	preface int     // preface bytes still to skip
	head    [9]byte // the frame header being read
	got     int     // bytes of head read
	payload int     // payload bytes of the current frame still to skip
	last    uint32  // the highest stream ID opened
}

// scan reads b and returns how many calls it started.
func (h *h2Calls) scan(b []byte) (started int) {
	for len(b) > 0 {
		switch {
		case h.preface > 0:
			n := min(h.preface, len(b))
			h.preface -= n
			b = b[n:]
		case h.payload > 0:
			n := min(h.payload, len(b))
			h.payload -= n
			b = b[n:]
		default:
			n := copy(h.head[h.got:], b)
			h.got += n
			b = b[n:]
			if h.got < len(h.head) {
				continue
			}
			h.got = 0
			h.payload = int(h.head[0])<<16 | int(h.head[1])<<8 | int(h.head[2])
			const headers = 0x1
			if id := binary.BigEndian.Uint32(h.head[5:]) &^ (1 << 31); h.head[3] == headers && id > h.last {
				h.last = id
				started++
			}
		}
	}
	return started
}
