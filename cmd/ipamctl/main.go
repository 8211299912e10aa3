// Command ipamctl is an operator's tool over a netipam store: a bbolt file
// (default ./ipam.db) or an etcd cluster. It creates, lists and deletes
// CIDRs, allocates and releases addresses, shows usage, and runs the
// repair pass against a file of consumers.
//
//	ipamctl [global flags] COMMAND [ARGS] [flags]
//
//	cidr create NAME PREFIX [PREFIX] [--dry-run]
//	                                     create a CIDR (one prefix per family)
//	cidr update NAME PREFIX PREFIX [--dry-run]
//	                                     make a single-stack CIDR dual-stack
//	cidr get [NAME]                      list CIDRs (Ready or Terminating), or show
//	                                     one with its Ready condition
//	cidr delete NAME [--dry-run]         delete a CIDR (Terminating while addresses hold it)
//	ip allocate --family 4|6|dual --parent REF [--ensure] [--dry-run]
//	                                     allocate the next free address(es); with
//	                                     --ensure, only for a family REF holds none of
//	ip allocate ADDR --parent REF [--ensure] [--dry-run]
//	                                     allocate a given address (--ensure: REF
//	                                     holding it already is no error)
//	ip get [ADDR | --parent REF | --cidr NAME]
//	                                     list records, show one, those of one owner,
//	                                     or those inside a CIDR
//	                                     (a record it cannot read: warned of, exit 1)
//	ip release ADDR... | --parent REF [--dry-run]
//	                                     release addresses, or an owner's
//	                                     (an ADDR without a record: named, the
//	                                     others released, exit 3; a record it
//	                                     cannot read: warned of, exit 1)
//	repair --consumers FILE [--dry-run] [--leak-grace 60s]
//	usage                                size, used and free addresses per CIDR prefix
//
// --dry-run says what the command would do, with the exit code it would
// give, writing nothing: it opens a bbolt file read-only, as the commands
// that only read do. Of ip allocate --family it gives an address the
// command may give: the command's search starts at random.
//
// Global flags, accepted anywhere on the line:
//
//	--db PATH            bbolt file (default ./ipam.db; created if missing
//	                     or empty only by cidr create, ip allocate and
//	                     repair without --dry-run)
//	--lock-timeout D     wait at most D for another process's file lock
//	                     (5s; not with --etcd)
//	--etcd EP[,EP...]    etcd endpoints (host:port or URLs), instead of --db
//	--etcd-prefix P      etcd key prefix (default /netipam)
//	--etcd-cacert FILE   CA bundle to verify etcd's certificate (TLS)
//	--etcd-cert FILE     client certificate for etcd, with --etcd-key FILE
//	--etcd-user NAME[:PASSWORD]  etcd user; the password, if not given
//	                     here, from $IPAMCTL_ETCD_PASSWORD, else asked
//	                     on the terminal
//	-o json|yaml         machine-readable output
//	-v                   log to stderr (slog text)
//	--timeout D          give up after D (default 30s)
//
// Exit codes: see the exit* constants and README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/netipam/netipam/admission"
	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// Exit codes.
const (
	exitOK       = 0 // done
	exitError    = 1 // anything else: store unreachable, I/O, timeout, corrupt data (ip get, ip release --parent: also done but for records it cannot read)
	exitUsage    = 2 // bad command line or invalid input (name, prefix, address, parentRef, not in range, refused by admission)
	exitNotFound = 3 // no such CIDR or address record (ip release ADDR...: some of them, the others released)
	exitConflict = 4 // already exists, already allocated, modified concurrently
	exitFull     = 5 // range is full: no free address in any live CIDR of the family
	exitPending  = 6 // cidr delete: the CIDR is Terminating, held by addresses (it goes once they are released)
	exitUnknown  = 7 // a write was sent and its answer lost: it may have been made, now or later (store.ErrOutcomeUnknown)
)

// unknownHint follows the error of a write whose outcome is unknown: a
// retry of ip allocate would give its owner a second address.
const unknownHint = "the change may have been made, or be made later: look (ip get --parent REF, cidr get NAME) before trying again"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer func() {
		// A bug: say so the way every error is said, with what a report
		// needs, and exit 1, not Go's 2, which means a usage error here.
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "ipamctl: internal error: %v\n%s", r, debug.Stack())
			os.Exit(exitError)
		}
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a bad command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// pendingError is cidr delete's outcome when the CIDR stays Terminating.
type pendingError struct{ err error }

func (e *pendingError) Error() string { return e.err.Error() }
func (e *pendingError) Unwrap() error { return e.err }

// exitCode maps an error to the documented exit code.
func exitCode(err error) int {
	var ue *usageError
	var pe *pendingError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &pe):
		return exitPending
	case errors.Is(err, store.ErrOutcomeUnknown):
		// Before the rest: its cause (a timeout) is no answer.
		return exitUnknown
	case errors.Is(err, allocator.ErrFull):
		return exitFull
	case errors.Is(err, store.ErrNotFound):
		return exitNotFound
	case errors.Is(err, allocator.ErrAllocated), errors.Is(err, store.ErrExists),
		errors.Is(err, store.ErrConflict), errors.Is(err, allocator.ErrDefaultMismatch):
		return exitConflict
	case errors.Is(err, ipaddress.ErrInvalid), errors.Is(err, allocator.ErrNotInRange),
		errors.Is(err, allocator.ErrMismatch), errors.Is(err, allocator.ErrTerminating),
		errors.Is(err, allocator.ErrExcluded), errors.Is(err, admission.ErrRejected):
		return exitUsage
	}
	return exitError
}

// flagSpec lists the flags: name → takes a value. Short and long names
// are aliases through flagAlias.
var flagSpec = map[string]bool{
	"db": true, "etcd": true, "etcd-prefix": true, "output": true, "v": false, "timeout": true,
	"etcd-cacert": true, "etcd-cert": true, "etcd-key": true, "etcd-user": true,
	"family": true, "parent": true, "cidr": true, "dry-run": false, "consumers": true, "leak-grace": true, "ensure": false,
	"help": false, "lock-timeout": true,
}

var flagAlias = map[string]string{"o": "output", "h": "help", "verbose": "v"}

var globalFlags = []string{"db", "etcd", "etcd-prefix", "output", "v", "timeout", "help", "lock-timeout",
	"etcd-cacert", "etcd-cert", "etcd-key", "etcd-user"}

// cmdline is a parsed command line: positional words and flags, which may
// come in any order ("ip allocate 10.0.0.1 --parent x" and "--parent x ip
// allocate 10.0.0.1" are the same).
type cmdline struct {
	args  []string
	flags map[string]string
}

func parseArgs(argv []string) (cmdline, error) {
	cl := cmdline{flags: map[string]string{}}
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			cl.args = append(cl.args, argv[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			cl.args = append(cl.args, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		value, hasValue := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = k, v, true
		}
		if full, ok := flagAlias[name]; ok {
			name = full
		}
		takes, known := flagSpec[name]
		if !known {
			return cl, usageErrorf("unknown flag %s", a)
		}
		switch {
		case takes && !hasValue:
			if i+1 >= len(argv) {
				return cl, usageErrorf("flag %s needs a value", a)
			}
			i++
			value = argv[i]
		case !takes && hasValue:
			if value != "true" && value != "false" {
				return cl, usageErrorf("flag %s takes no value", a)
			}
		case !takes:
			value = "true"
		}
		if _, dup := cl.flags[name]; dup {
			return cl, usageErrorf("flag --%s given twice", name)
		}
		cl.flags[name] = value
	}
	return cl, nil
}

func (cl cmdline) has(name string) bool { return cl.flags[name] == "true" }

// allow refuses the flags that are neither global nor in names.
func (cl cmdline) allow(cmd string, names ...string) error {
	for f := range cl.flags {
		if !contains(globalFlags, f) && !contains(names, f) {
			return usageErrorf("%s: unknown flag --%s", cmd, f)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// env is what a command runs with.
type env struct {
	ctx    context.Context
	cl     cmdline
	out    format
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer // shared with log, under one lock (lockedWriter)
	log    *slog.Logger
	now    time.Time
	a      *allocator.Allocator
	st     store.Store

	in     input       // the command's arguments and flags, parsed
	access storeAccess // how the command opens a bbolt file
}

// storeAccess is how a command opens its store (command's mustExist and
// readOnly say why).
type storeAccess struct {
	mustExist bool // a missing file is an error, not a new store
	// readOnly: nothing is written. A bbolt file is opened read-only, a
	// shared lock; etcd, which has no read-only connection, through a
	// store that refuses every write (noWrites), so that not even what
	// the allocator does of itself is done (the removal of a CIDR left
	// Terminating with nothing in it, when it opens the store).
	readOnly bool
}

// input is what a command's parse (and repair's prepare) made of its
// arguments and flags, before the store is opened.
type input struct {
	prefixes  []netip.Prefix      // cidr create and update
	addrs     []netip.Addr        // ip allocate, get, release ADDR
	parent    ipaddress.ParentRef // --parent, when byParent
	byParent  bool
	cidr      string             // ip get --cidr
	families  []ipaddress.Family // ip allocate --family, without ADDR
	ensure    bool               // ip allocate --ensure
	leakGrace time.Duration      // repair --leak-grace, as repair.Repairer takes it
	consumers []repair.Consumer  // repair --consumers, read by its prepare
}

func run(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out := &outputWriter{w: stdout}
	err := runErr(ctx, argv, stdin, out, stderr)
	if out.err == nil {
		return report(stderr, err)
	}
	// What the command did stands: say it where it can still be read. A
	// command that failed keeps its exit code; one that did not fails
	// with 1, as its caller did not get its output.
	fmt.Fprintf(stderr, "ipamctl: writing the output: %v; what was not written follows:\n%s", out.err, out.lost)
	if out.dropped > 0 {
		fmt.Fprintf(stderr, "ipamctl: (and %d more bytes)\n", out.dropped)
	}
	if err == nil {
		err = fmt.Errorf("the command was carried out, but its output could not be written: %w", out.err)
	}
	return report(stderr, err)
}

// report says what was wrong, if anything, on stderr, and returns the exit
// code of err.
func report(stderr io.Writer, err error) int {
	code := exitCode(err)
	if err != nil && code != exitPending {
		fmt.Fprintf(stderr, "ipamctl: %v\n", err)
		if code == exitUnknown {
			fmt.Fprintf(stderr, "ipamctl: %s\n", unknownHint)
		}
		var ue *usageError
		if errors.As(err, &ue) && strings.HasPrefix(ue.msg, "usage") {
			fmt.Fprint(stderr, usageText)
		}
	}
	return code
}

const usageText = `
Usage: ipamctl [--db FILE | --etcd HOST:PORT,... [etcd flags]] [-o json|yaml] [-v] COMMAND

Commands:
  cidr create NAME PREFIX [PREFIX] [--dry-run]
                                        create a CIDR (one prefix per family)
  cidr update NAME PREFIX PREFIX [--dry-run]
                                        make a single-stack CIDR dual-stack
  cidr get [NAME]                       list CIDRs (Ready or Terminating), or show
                                        one with its Ready condition
  cidr delete NAME [--dry-run]          delete a CIDR (Terminating while addresses hold it)
  ip allocate --family 4|6|dual --parent REF [--ensure] [--dry-run]
                                        allocate the next free address (of each family);
                                        --ensure: print the one REF holds, if it does
  ip allocate ADDR --parent REF [--ensure] [--dry-run]
                                        allocate the given address; --ensure:
                                        print it if REF holds it already
  ip get [ADDR | --parent REF | --cidr NAME]
                                        list address records, show one, an owner's,
                                        or those inside a CIDR
  ip release ADDR... | --parent REF [--dry-run]
                                        release addresses (those without a record
                                        are named, the others released: exit 3)
  repair --consumers FILE [--dry-run] [--leak-grace 60s]
                                        reconcile records with a consumers file
  usage                                 size, used and free addresses per CIDR prefix

--dry-run: say what the command would do, with the exit code it would give,
writing nothing (a bbolt FILE is opened read-only, and must exist); of ip
allocate --family, an address it may give (its search starts at random).

Global flags, anywhere on the line:
  --db FILE             bbolt file (default ./ipam.db; created if missing
                        or empty only by cidr create, ip allocate and
                        repair without --dry-run)
  --lock-timeout D      wait at most D for another process's lock on FILE
                        (5s; not with --etcd)
  --etcd EP,...         etcd endpoints (host:port or https://host:port),
                        instead of --db
  --etcd-prefix P       etcd key prefix (default /netipam)
  --etcd-cacert FILE    CA bundle to verify etcd's certificate (TLS)
  --etcd-cert FILE      client certificate for etcd (TLS), with
  --etcd-key FILE       its key
  --etcd-user NAME[:PASSWORD]
                        authenticate to etcd as NAME; without :PASSWORD
                        (which other users can see on the command line)
                        the password is read from $IPAMCTL_ETCD_PASSWORD,
                        else asked for on the terminal
  -o json|yaml          machine-readable output
  -v                    log to stderr
  --timeout D           give up after D (default 30s)

REF is resource[.group]/[namespace/]name, e.g. services/default/kubernetes.
Exit codes: 0 ok, 1 error, 2 usage or invalid input, 3 not found,
4 conflict (exists, already allocated), 5 range is full,
6 deletion pending (CIDR Terminating), 7 outcome unknown (etcd's answer
to a change was lost: look before trying again).
`

func runErr(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	inv, err := parseLine(argv, stdin, stdout, stderr)
	if err != nil || inv == nil { // an error, or help printed
		return err
	}
	// Asked before --timeout starts, which is for the store, not the user.
	if es := inv.spec.etcd; es != nil && es.askPassword {
		if err := askEtcdPassword(ctx, es, stdin, stderr); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, inv.timeout)
	defer cancel()
	inv.e.ctx = ctx
	err = runCmd(inv.e, inv.cmd, inv.spec)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v (see --timeout): %w", inv.timeout, err)
	}
	return err
}

// invocation is a command line checked in full, ready to run.
type invocation struct {
	e       *env // without its ctx, which runErr gives it
	cmd     command
	spec    storeSpec
	timeout time.Duration
}

// parseLine checks everything on the command line before any of it is
// acted on, so that a mistake exits 2 having created no file, waited for
// no lock and contacted no etcd (it only reads TLS files named by flags).
// It returns nil and no error when it printed the help.
func parseLine(argv []string, stdin io.Reader, stdout, stderr io.Writer) (*invocation, error) {
	cl, err := parseArgs(argv)
	if err != nil {
		return nil, err
	}
	if cl.has("help") || len(cl.args) == 0 || cl.args[0] == "help" {
		if len(cl.args) == 0 && !cl.has("help") {
			return nil, usageErrorf("usage: a command is required")
		}
		fmt.Fprint(stdout, strings.TrimPrefix(usageText, "\n"))
		return nil, nil
	}
	if f, ok := cl.flags["output"]; ok && f == "" {
		// An unset variable in -o "$FORMAT" must not mean the table, as
		// in --db "$DB" it must not mean ./ipam.db.
		return nil, usageErrorf(`-o "": no format named (table, wide, json or yaml)`)
	}
	out, err := parseFormat(cl.flags["output"])
	if err != nil {
		return nil, err
	}
	timeout := 30 * time.Second
	if s, ok := cl.flags["timeout"]; ok {
		if timeout, err = time.ParseDuration(s); err != nil || timeout <= 0 {
			return nil, usageErrorf("--timeout %q: must be a positive duration such as 30s", s)
		}
	}
	// The store's watch reports what it skips from its own goroutine,
	// while -v logs from this one.
	stderr = &lockedWriter{w: stderr}
	log := slog.New(slog.DiscardHandler)
	if cl.has("v") {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cmd, ok := lookup(cl.args)
	if !ok {
		if subs := subcommands(cl.args[0]); len(subs) > 0 {
			return nil, usageErrorf("usage: unknown command %q: ipamctl %s takes %s", strings.Join(cl.args, " "), cl.args[0], strings.Join(subs, ", "))
		}
		return nil, usageErrorf("usage: unknown command %q", strings.Join(cl.args, " "))
	}
	if err := cl.allow(cmd.name, cmd.flags...); err != nil {
		return nil, err
	}
	cl.args = cl.args[len(strings.Fields(cmd.name)):]
	if err := cmd.checkArgs(cl.args); err != nil {
		return nil, err
	}
	spec, err := parseStoreFlags(cl)
	if err != nil {
		return nil, err
	}
	e := &env{cl: cl, out: out, stdin: stdin, stdout: stdout, stderr: stderr, log: log, now: time.Now(),
		access: storeAccess{mustExist: cmd.mustExist || cmd.readOnly, readOnly: cmd.readOnly}}
	if cmd.parse != nil {
		if err := cmd.parse(e); err != nil {
			return nil, err
		}
	}
	return &invocation{e: e, cmd: cmd, spec: spec, timeout: timeout}, nil
}

// runCmd runs cmd: its input is read first, so that the store (and a
// bbolt file's lock) is held only while the command works on it.
func runCmd(e *env, cmd command, spec storeSpec) error {
	if cmd.prepare != nil {
		if err := cmd.prepare(e); err != nil {
			return err
		}
	}
	st, err := openStore(e.ctx, spec, e.log, e.access, e.warn)
	if err != nil {
		return err
	}
	defer st.Close()
	a, err := allocator.New(e.ctx, st, allocator.WithLogger(e.log))
	if err != nil {
		return fmt.Errorf("reading the store: %w", err)
	}
	defer a.Close()
	e.a, e.st = a, st
	return cmd.run(e)
}

// storeSpec is the store the global flags name.
type storeSpec struct {
	etcd        *etcdSpec // nil: the bbolt file at path
	path        string
	lockTimeout time.Duration
}

// parseStoreFlags checks the store flags, touching nothing.
func parseStoreFlags(cl cmdline) (storeSpec, error) {
	spec := storeSpec{path: "ipam.db", lockTimeout: 5 * time.Second}
	if s, ok := cl.flags["lock-timeout"]; ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return spec, usageErrorf("--lock-timeout %q: must be a duration such as 5s, 0 for no wait", s)
		}
		spec.lockTimeout = d
	}
	if _, ok := cl.flags["etcd"]; ok {
		if _, both := cl.flags["db"]; both {
			return spec, usageErrorf("--db and --etcd exclude each other")
		}
		if _, ok := cl.flags["lock-timeout"]; ok {
			// Taken and ignored, it would look like a bound it is not.
			return spec, usageErrorf("--lock-timeout is for the --db file's lock; with --etcd there is none (--timeout bounds the command)")
		}
		var err error
		spec.etcd, err = parseEtcdFlags(cl)
		return spec, err
	}
	for _, f := range []string{"etcd-prefix", "etcd-cacert", "etcd-cert", "etcd-key", "etcd-user"} {
		if _, ok := cl.flags[f]; ok {
			return spec, usageErrorf("--%s needs --etcd", f)
		}
	}
	if path, ok := cl.flags["db"]; ok {
		if path == "" {
			// An unset variable in --db "$DB" must not mean ./ipam.db.
			return spec, usageErrorf(`--db "": no file named`)
		}
		spec.path = path
	}
	return spec, nil
}

// warn tells the user of a problem the command went on past: a value
// in etcd that cannot be read (whose CIDR is then left out), a failed
// re-list. Always, not only with -v: a listing short of a CIDR must say so.
func (e *env) warn(err error) {
	fmt.Fprintf(e.stderr, "ipamctl: warning: %v\n", err)
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// openStore opens the bbolt file or connects to etcd; warn receives what
// an etcd store's watch skips.
func openStore(ctx context.Context, spec storeSpec, log *slog.Logger, access storeAccess, warn func(error)) (store.Store, error) {
	if spec.etcd != nil {
		st, err := openEtcd(ctx, spec.etcd, log, warn)
		if err != nil || !access.readOnly {
			return st, err
		}
		log.Debug("read-only: the etcd store takes no write")
		return noWrites{st}, nil
	}
	path := spec.path
	opts := []bolt.Option{bolt.WithLockTimeout(spec.lockTimeout)}
	if access.mustExist {
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no store at %s (this command does not create one; check --db)", path)
		}
		// An empty file (touch, or a crash before bbolt's first write)
		// holds no store either, but bbolt would make one of it, and these
		// commands would answer "not found" from that. A file another
		// ipamctl is creating is empty for a moment: refused then too.
		if err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
			return nil, fmt.Errorf("no store at %s: the file is empty, not a netipam store (this command does not create one; check --db)", path)
		}
	}
	if access.readOnly {
		// A shared lock, a file one may only read, and nothing written,
		// not even to make a store of an empty file.
		opts = append(opts, bolt.WithReadOnly())
	}
	log.Debug("opening bolt store", "path", path, "readOnly", access.readOnly)
	// --timeout and Ctrl-C end the wait for the lock too.
	return bolt.OpenContext(ctx, path, opts...)
}
