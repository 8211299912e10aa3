// Command renumber runs SPEC walkthrough 8.3: a cluster moves its services
// from 10.96.0.0/28 to 192.168.7.0/24 without ever handing out an address
// twice or orphaning one.
//
//	go run ./examples/renumber
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
	return walk.Renumber(w, netip.MustParsePrefix("10.96.0.0/28"), netip.MustParsePrefix("192.168.7.0/24"))
}
