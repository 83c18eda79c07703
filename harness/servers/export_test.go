package servers

// Dir is the directory of s, a server or cluster of this package, which
// its Stop removes.
func Dir(s any) string { return s.(interface{ directory() string }).directory() }

// directory is the server's directory, which Stop removes.
func (s *base) directory() string { return s.dir }

// directory is the group's directory, which holds its members' and which
// Stop removes.
func (g *group) directory() string { return g.dir }

// SentinelPids are the process ids of c's sentinels (not Members).
func SentinelPids(c *RedisSentinel) []int {
	var pids []int
	for _, p := range c.sentinels {
		pids = append(pids, p.Pid())
	}
	return pids
}
