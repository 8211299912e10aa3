// Command familymigration runs SPEC walkthrough 8.4: a cluster moves its
// services from IPv4 (10.96.0.0/28) to IPv6 (fd00:10:96::/112), the same way
// as renumbering.
//
//	go run ./examples/familymigration
package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/netipam/netipam/examples/internal/walk"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	return walk.Renumber(w, netip.MustParsePrefix("10.96.0.0/28"), netip.MustParsePrefix("fd00:10:96::/112"))
}
