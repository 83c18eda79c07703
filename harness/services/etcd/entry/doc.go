// Package entry is etcd as the suite's environment (suite/local) runs
// backends on it: its services.Service descriptors (sizes, variables, how
// a server of the user's is read and probed, how the harness's starts),
// and Backends, the backends on it, which suite/local's registry lists.
package entry
