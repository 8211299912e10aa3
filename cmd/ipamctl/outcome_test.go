package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/netipam/netipam/store"
)

// A change whose outcome the store could not learn (store.ErrOutcomeUnknown:
// the etcd store lost etcd's answer) exits 7 and says to look before trying
// again, whatever its cause: a broken connection, the --timeout while it
// was in flight, a closed store. A timeout before anything was sent, or a
// refusal, is exit 1 as before. The help and the README list the code.
func TestAnOutcomeUnknownExitsSevenAndSaysToLook(t *testing.T) {
	unknown := func(cause error) error {
		return fmt.Errorf("allocating an IPv4 address: etcd store: create addresses: %w: %w", store.ErrOutcomeUnknown, cause)
	}
	timedOut := func(err error) error { return fmt.Errorf("timed out after 30s (see --timeout): %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"connection broken", unknown(errors.New("rpc error: code = Unavailable desc = error reading from server: EOF")), exitUnknown},
		{"timed out in flight", timedOut(unknown(context.DeadlineExceeded)), exitUnknown},
		{"store closed", unknown(store.ErrClosed), exitUnknown},
		{"timed out before sending", timedOut(fmt.Errorf("allocating an IPv4 address: %w", context.DeadlineExceeded)), exitError},
		{"refused", errors.New("allocating an IPv4 address: etcd store: create addresses: etcdserver: permission denied"), exitError},
	} {
		var stderr bytes.Buffer
		code := report(&stderr, tc.err)
		if code != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, code, tc.want)
		}
		said := stderr.String()
		if !strings.HasPrefix(said, "ipamctl: "+tc.err.Error()+"\n") {
			t.Errorf("%s: stderr %q does not give the error", tc.name, said)
		}
		if hint := strings.Contains(said, unknownHint); hint != (tc.want == exitUnknown) {
			t.Errorf("%s: stderr %q, hint to look given: %v", tc.name, said, hint)
		}
	}
	if !strings.Contains(usageText, "7 outcome unknown") {
		t.Errorf("the help does not list exit 7:\n%s", usageText)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "| 7 | outcome unknown") {
		t.Error("README.md does not list exit 7")
	}
}
