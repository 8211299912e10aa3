//go:build race

package etcd

const raceEnabled = true
