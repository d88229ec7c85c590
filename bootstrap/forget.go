package bootstrap

// Mark is a namespace's position in its history, taken when its prefill's
// health checks start failing: bootstrap.forget_after resets the namespace
// only if it is still there, so a prefill that came back and registered
// again meanwhile keeps its registration.
type Mark struct {
	// Gen counts this process's changes to the namespace.
	Gen uint64
	// Rev is the store revision of the namespace (0 without a store, or
	// while nothing is stored).
	Rev int64
}

// MarkOf returns port's mark; false when there is no such namespace.
func (r *Registry) MarkOf(port int) (Mark, bool) {
	ns := r.namespace(port)
	if ns == nil {
		return Mark{}, false
	}
	_, rev := ns.stored()
	return Mark{Gen: ns.gen.Load(), Rev: rev}, true
}

// ForgetUnchanged resets port's namespace (one pdlb, no store) if nothing
// changed it since m, and returns how many ranks it dropped (-1: not reset).
func (r *Registry) ForgetUnchanged(port int, m Mark) int {
	ns := r.namespace(port)
	if ns == nil {
		return -1
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.gen.Load() != m.Gen || len(ns.st.ranks) == 0 && ns.st.topo == nil {
		return -1
	}
	n := len(ns.st.ranks)
	ns.st = NamespaceState{ranks: map[rankKey]RankInfo{}}
	ns.dp.clear()
	ns.publish()
	return n
}
