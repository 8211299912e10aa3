module github.com/netipam/netipam/store/bolt

go 1.26

require (
	github.com/netipam/netipam v0.0.0
	go.etcd.io/bbolt v1.5.0
)

require (
	go4.org/netipx v0.0.0-20260823151212-3075585bcbeb // indirect
	golang.org/x/sys v0.45.0 // indirect
)

replace github.com/netipam/netipam => ../..
