module github.com/netipam/netipam

go 1.26

require (
	go4.org/netipx v0.0.0-20260823151212-3075585bcbeb
	pgregory.net/rapid v1.3.0
)
