module github.com/netipam/netipam

go 1.26

require (
	github.com/google/go-cmp v0.7.0 // indirect
	go4.org/netipx v0.0.0-20260823151212-3075585bcbeb // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
