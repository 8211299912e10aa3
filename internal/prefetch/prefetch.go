// Package prefetch asks the processor to start loading a cache line that
// will be read soon, without waiting for it.
//
// A plain load would do the same, but it holds up the instructions behind
// it once the processor's window of work in flight fills, a few hundred
// instructions on: a search of a large structure that follows stalls on
// it. A prefetch instruction retires at once, so a load from memory (a
// few hundred nanoseconds past the caches) overlaps the whole search.
// It never faults and changes no result; on architectures other than
// amd64 and arm64, Line and Lines do nothing.
package prefetch
