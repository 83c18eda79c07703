// Package services describes the lock services the suite runs its
// backends on, one folder each below it (redis, postgres, etcd, ...).
//
// A service folder holds two packages: the service's servers as the harness
// starts them here (package <service>: start, crash and restart, a
// cluster), which an adapter's own tests import, and its entry (package
// <service>/entry): the Service and Backend descriptors that suite/local's
// registry lists, the CLI reads (which pods a backend needs under
// --kubernetes, Service.Pod) and the docs are checked against.
//
// This package is what the entries share: the descriptor types (Service,
// Backend, Kind), the connection the environment gives a service (Conn),
// the diagnosis of a server that does not answer (Symptoms, Diagnose), and
// suite.Servers for a server the harness started (ServerMembers, Process,
// ClusterServers, Crashing). It starts nothing itself: harness/servers is
// the kit the services' servers are built with.
package services
