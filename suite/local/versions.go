package local

import (
	"os"
	"slices"

	"github.com/locksuite/locksuite/harness/services"
)

// ServerVersions describes the server of each service that the backends
// or services names run on, once per service, in table order: one pair
// ("<service> server", what it is) each. A server the environment names
// (the first of its variables that is set) is not asked: "named by
// REDIS_URL (version not asked)". Otherwise it is the server the harness
// would start here: the version its binary reports (the binary's path,
// then the first line of its answer), the version of an embedded server's
// module, or "not found here". Unknown names are left out.
func ServerVersions(names []string) [][2]string {
	var out [][2]string
	for _, s := range servicesOf(names) {
		v := "unknown"
		if n := namedBy(s); n != "" {
			v = "named by " + n + " (version not asked)"
		} else if s.Version != nil {
			v = s.Version()
		}
		out = append(out, [2]string{s.Name + " server", v})
	}
	return out
}

// ClientModules lists the Go modules of the clients of the backends
// names (of a service's name: every backend on it), and of the servers
// embedded in this process, each once, in table order.
func ClientModules(names []string) []string {
	var out []string
	for _, b := range table.backends {
		if slices.Contains(names, b.Name) || slices.Contains(names, b.On.Name) {
			for _, m := range b.Modules {
				if !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// servicesOf lists the services that names (backends or services) run on,
// each once, in table order.
func servicesOf(names []string) []*services.Service {
	var out []*services.Service
	for _, s := range allServices() {
		for _, n := range names {
			if o, ok := serviceOf(n); ok && o == s {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// namedBy is the first of s's variables set in the environment, or "".
func namedBy(s *services.Service) string {
	for _, v := range s.Vars {
		if os.Getenv(v) != "" {
			return v
		}
	}
	return ""
}
